// Fast, reproducible 64-bit content digest (results, parameters, traces): equal digests across runs
// and backends mean equal bytes. Not cryptographic.
//
// Exact definition, for reimplementation. All arithmetic is modulo 2^64; P = 0x100000001b3 (the
// FNV-1a 64-bit prime), h starts at 0xcbf29ce484222325 (the FNV-1a offset basis), L = 0.
//   * The input, concatenated over all update() calls, is cut into 8-byte words, each read
//     little-endian. For every full word w:   h = (h ^ w) * P;  h ^= h >> 32
//     (FNV-1a on 8 bytes at a time; the xor-shift feeds high bits back down so differences in
//     the top bits of two words cannot cancel). L counts every input byte.
//   * hex(): if L % 8 != 0, the trailing bytes, zero-padded to 8 and read little-endian, form one
//     more word processed as above. Then h = (h ^ L) * P; h ^= h >> 32, and finally the MurmurHash3
//     fmix64 avalanche: h ^= h >> 33; h *= 0xff51afd7ed558ccd; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53;
//     h ^= h >> 33. The result is h as 16 lowercase hex digits, most significant first.
//   * update_u64(v) is update() with the 8 little-endian bytes of v.
// Splitting the input differently across update() calls never changes the digest.
// Known answers: "" -> "b8371b5e9326a9e3", "a" -> "d4dfdca90c5e5018",
// "hello world, pstwin" -> "124813ab6dfe00fc".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace pstwin {

class Digest {
 public:
  void update(std::span<const std::byte> bytes);
  void update_u64(std::uint64_t value);
  std::string hex() const;  // does not consume: more updates may follow

 private:
  void absorb(std::uint64_t word);

  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
  std::uint64_t length_ = 0;
  std::array<std::byte, 8> pending_{};  // bytes of an incomplete word
  std::size_t pending_size_ = 0;
};

// One-shot convenience.
std::string hex_digest(std::span<const std::byte> bytes);

}  // namespace pstwin
