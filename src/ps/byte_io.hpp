// Little-endian writing and bounds-checked reading of control-message bodies. The reader never
// trusts a length and names the field that is wrong.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/payload.hpp"

namespace pstwin {

class ByteWriter {
 public:
  void u32(std::uint32_t v) { put(v, 4); }
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void u64(std::uint64_t v) { put(v, 8); }
  void f64(double v) { u64(std::bit_cast<std::uint64_t>(v)); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    for (char c : s) bytes_.push_back(static_cast<std::byte>(c));
  }
  Payload finish() const { return Payload::copy_of(bytes_); }

 private:
  void put(std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) bytes_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  std::vector<std::byte> bytes_;
};

class ByteReader {
 public:
  static constexpr std::size_t kMaxString = 4096;

  explicit ByteReader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  bool u32(std::uint32_t& v, const char* field) {
    std::uint64_t wide = 0;
    if (!get(wide, 4, field)) return false;
    v = static_cast<std::uint32_t>(wide);
    return true;
  }
  bool i32(std::int32_t& v, const char* field) {
    std::uint32_t u = 0;
    if (!u32(u, field)) return false;
    v = static_cast<std::int32_t>(u);
    return true;
  }
  bool u64(std::uint64_t& v, const char* field) { return get(v, 8, field); }
  bool f64(double& v, const char* field) {
    std::uint64_t u = 0;
    if (!u64(u, field)) return false;
    v = std::bit_cast<double>(u);
    return true;
  }
  bool str(std::string& s, const char* field) {
    std::string_view view;
    if (!str(view, field)) return false;
    s.assign(view);
    return true;
  }
  // The string in place: valid as long as the bytes read.
  bool str(std::string_view& s, const char* field) {
    std::uint32_t n = 0;
    if (!u32(n, field)) return false;
    if (n > kMaxString || bytes_.size() - pos_ < n) [[unlikely]]
      return bad_length(field, n);
    s = std::string_view(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  // A count of items of at least `item_bytes` each: refused if the rest cannot hold that many.
  bool count(std::uint32_t& n, std::size_t item_bytes, const char* field) {
    if (!u32(n, field)) return false;
    if (static_cast<std::uint64_t>(n) * item_bytes > bytes_.size() - pos_)
      return fail(field, std::to_string(n) + " entries do not fit in the remaining " +
                             std::to_string(bytes_.size() - pos_) + " bytes");
    return true;
  }
  bool at_end(const char* what) {
    return pos_ == bytes_.size() ? true
                                 : fail(what, std::to_string(bytes_.size() - pos_) + " trailing bytes");
  }
  std::size_t remaining() const { return bytes_.size() - pos_; }
  const std::string& error() const { return error_; }
  bool fail(const char* field, const std::string& what) {
    error_ = std::string(field) + ": " + what;
    return false;
  }

 private:
  // Out of line (a length over the limit, or bytes missing), so that reading inlines: every simulated
  // node reads each entry of the node table.
  [[gnu::cold, gnu::noinline]] bool bad_length(const char* field, std::uint32_t n) {
    if (n > kMaxString)
      return fail(field, "length " + std::to_string(n) + " exceeds " + std::to_string(kMaxString));
    return fail(field, "truncated");
  }

  bool get(std::uint64_t& v, int n, const char* field) {
    if (bytes_.size() - pos_ < static_cast<std::size_t>(n)) [[unlikely]]
      return bad_length(field, 0);
    v = 0;
    if constexpr (std::endian::native == std::endian::little) {
      // One load: a simulated node table of 8,256 entries is read by each of its 8,256 nodes.
      std::memcpy(&v, bytes_.data() + pos_, static_cast<std::size_t>(n));
    } else {
      for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(bytes_[pos_ + i]) << (8 * i);
    }
    pos_ += static_cast<std::size_t>(n);
    return true;
  }
  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
  std::string error_;
};

// The bytes of a control payload (a phantom has none).
inline std::span<const std::byte> control_bytes(const Payload& payload) {
  return payload.is_phantom() ? std::span<const std::byte>{} : payload.bytes();
}

}  // namespace pstwin
