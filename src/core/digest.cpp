#include "core/digest.hpp"

#include <algorithm>
#include <cstring>

namespace pstwin {

namespace {

constexpr std::uint64_t kPrime = 0x100000001b3ULL;

std::uint64_t load_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint8_t>(p[i]);
  return v;
}

constexpr std::uint64_t step(std::uint64_t h, std::uint64_t word) {
  h = (h ^ word) * kPrime;
  return h ^ (h >> 32);
}

}  // namespace

void Digest::absorb(std::uint64_t word) {
  hash_ = step(hash_, word);
}

void Digest::update(std::span<const std::byte> bytes) {
  length_ += bytes.size();
  const std::byte* p = bytes.data();
  std::size_t left = bytes.size();
  if (pending_size_ > 0) {
    const std::size_t take = std::min(left, pending_.size() - pending_size_);
    std::memcpy(pending_.data() + pending_size_, p, take);
    pending_size_ += take;
    p += take;
    left -= take;
    if (pending_size_ < pending_.size()) return;
    absorb(load_le64(pending_.data()));
    pending_size_ = 0;
  }
  // Hot loop: the byte-wise load compiles to one mov on little-endian hosts.
  std::uint64_t h = hash_;
  for (; left >= 8; left -= 8, p += 8) h = step(h, load_le64(p));
  hash_ = h;
  if (left > 0) {
    std::memcpy(pending_.data(), p, left);
    pending_size_ = left;
  }
}

void Digest::update_u64(std::uint64_t value) {
  std::array<std::byte, 8> le{};
  for (auto& b : le) {
    b = static_cast<std::byte>(value & 0xFFu);
    value >>= 8;
  }
  update(le);
}

std::string Digest::hex() const {
  std::uint64_t h = hash_;
  if (pending_size_ > 0) {
    std::array<std::byte, 8> padded{};
    std::memcpy(padded.data(), pending_.data(), pending_size_);
    h = step(h, load_le64(padded.data()));
  }
  h = step(h, length_);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;

  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) out[static_cast<std::size_t>(i)] = kDigits[h & 0xF];
  return out;
}

std::string hex_digest(std::span<const std::byte> bytes) {
  Digest d;
  d.update(bytes);
  return d.hex();
}

}  // namespace pstwin
