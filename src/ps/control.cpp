#include "ps/control.hpp"

#include <cstring>
#include <limits>

namespace pstwin {
namespace {

constexpr std::size_t kMaxString = 4096;
constexpr std::uint32_t kMaxTableEntries = 1 << 20;

class ByteWriter {
 public:
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<std::byte>(v >> (8 * i)));
  }
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    for (char c : s) bytes_.push_back(static_cast<std::byte>(c));
  }
  Payload finish() const { return Payload::copy_of(bytes_); }

 private:
  std::vector<std::byte> bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  bool u32(std::uint32_t& v, const char* field) {
    if (bytes_.size() - pos_ < 4) return fail(field, "truncated");
    v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(bytes_[pos_ + i]) << (8 * i);
    pos_ += 4;
    return true;
  }
  bool i32(std::int32_t& v, const char* field) {
    std::uint32_t u = 0;
    if (!u32(u, field)) return false;
    v = static_cast<std::int32_t>(u);
    return true;
  }
  bool str(std::string& s, const char* field) {
    std::uint32_t n = 0;
    if (!u32(n, field)) return false;
    if (n > kMaxString)
      return fail(field, "length " + std::to_string(n) + " exceeds " + std::to_string(kMaxString));
    if (bytes_.size() - pos_ < n) return fail(field, "truncated");
    s.assign(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool at_end(const char* what) {
    return pos_ == bytes_.size() ? true
                                 : fail(what, std::to_string(bytes_.size() - pos_) + " trailing bytes");
  }
  const std::string& error() const { return error_; }

 private:
  bool fail(const char* field, const std::string& what) {
    error_ = std::string(field) + ": " + what;
    return false;
  }
  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
  std::string error_;
};

void write_info(ByteWriter& w, const NodeInfo& info) {
  w.i32(info.id);
  w.u32(static_cast<std::uint32_t>(info.role));
  w.i32(info.rank);
  w.str(info.address);
  w.str(info.host);
}

bool read_info(ByteReader& r, NodeInfo& info) {
  std::uint32_t role = 0;
  if (!r.i32(info.id, "node.id") || !r.u32(role, "node.role") || !r.i32(info.rank, "node.rank") ||
      !r.str(info.address, "node.address") || !r.str(info.host, "node.host"))
    return false;
  if (role > static_cast<std::uint32_t>(Role::kValidator)) return false;
  info.role = static_cast<Role>(role);
  return true;
}

std::span<const std::byte> real_bytes(const Payload& payload) {
  return payload.is_phantom() ? std::span<const std::byte>{} : payload.bytes();
}

}  // namespace

Payload encode_node_info(const NodeInfo& info) {
  ByteWriter w;
  write_info(w, info);
  return w.finish();
}

Payload encode_node_table(const std::vector<NodeInfo>& table) {
  ByteWriter w;
  w.u32(static_cast<std::uint32_t>(table.size()));
  for (const auto& info : table) write_info(w, info);
  return w.finish();
}

Payload encode_text(std::string_view text) {
  return Payload::copy_of(std::as_bytes(std::span(text.data(), text.size())));
}

std::optional<NodeInfo> decode_node_info(const Payload& payload, std::string& error) {
  ByteReader r(real_bytes(payload));
  NodeInfo info;
  if (!read_info(r, info) || !r.at_end("node")) {
    error = r.error().empty() ? "node.role: unknown role" : r.error();
    return std::nullopt;
  }
  return info;
}

std::optional<std::vector<NodeInfo>> decode_node_table(const Payload& payload, std::string& error) {
  ByteReader r(real_bytes(payload));
  std::uint32_t count = 0;
  if (!r.u32(count, "table.count")) {
    error = r.error();
    return std::nullopt;
  }
  if (count > kMaxTableEntries) {
    error = "table.count: " + std::to_string(count) + " entries exceeds " + std::to_string(kMaxTableEntries);
    return std::nullopt;
  }
  std::vector<NodeInfo> table;
  for (std::uint32_t i = 0; i < count; ++i) {
    NodeInfo info;
    if (!read_info(r, info)) {
      error = r.error().empty() ? "node.role: unknown role" : r.error();
      return std::nullopt;
    }
    table.push_back(std::move(info));
  }
  if (!r.at_end("table")) {
    error = r.error();
    return std::nullopt;
  }
  return table;
}

std::string decode_text(const Payload& payload) {
  const auto bytes = real_bytes(payload);
  return std::string(reinterpret_cast<const char*>(bytes.data()),
                     std::min<std::size_t>(bytes.size(), kMaxString));
}

}  // namespace pstwin
