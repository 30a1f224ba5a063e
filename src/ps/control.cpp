#include "ps/control.hpp"

#include "ps/byte_io.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace pstwin {
namespace {

constexpr std::uint32_t kMaxTableEntries = 1 << 20;
constexpr std::size_t kMinEntryBytes = 20;  // id, role, rank and the two strings' lengths
constexpr std::uint32_t kMaxRefusalFields = 4096;

void write_info(ByteWriter& w, const NodeInfo& info) {
  w.i32(info.id);
  w.u32(static_cast<std::uint32_t>(info.role));
  w.i32(info.rank);
  w.str(info.address);
  w.str(info.host);
}

// NodeInfo or NodeInfoView.
template <class Info>
bool read_info(ByteReader& r, Info& info) {
  std::uint32_t role = 0;
  if (!r.i32(info.id, "node.id") || !r.u32(role, "node.role") || !r.i32(info.rank, "node.rank") ||
      !r.str(info.address, "node.address") || !r.str(info.host, "node.host"))
    return false;
  if (role > static_cast<std::uint32_t>(Role::kValidator)) return false;
  info.role = static_cast<Role>(role);
  return true;
}

template <class Info>
std::optional<std::vector<Info>> decode_table(const Payload& payload, std::string& error) {
  ByteReader r(control_bytes(payload));
  std::uint32_t count = 0;
  if (!r.u32(count, "table.count")) {
    error = r.error();
    return std::nullopt;
  }
  if (count > kMaxTableEntries) {
    error = "table.count: " + std::to_string(count) + " entries exceeds " + std::to_string(kMaxTableEntries);
    return std::nullopt;
  }
  std::vector<Info> table;
  // Room for what the bytes can hold (an entry takes at least kMinEntryBytes), instead of growing
  // and moving the entries along.
  table.reserve(std::min<std::size_t>(count, r.remaining() / kMinEntryBytes));
  for (std::uint32_t i = 0; i < count; ++i) {
    Info info;
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

std::optional<NodeInfo> decode_node_info(const Payload& payload, std::string& error) {
  ByteReader r(control_bytes(payload));
  NodeInfo info;
  if (!read_info(r, info) || !r.at_end("node")) {
    error = r.error().empty() ? "node.role: unknown role" : r.error();
    return std::nullopt;
  }
  return info;
}

std::optional<std::vector<NodeInfo>> decode_node_table(const Payload& payload, std::string& error) {
  return decode_table<NodeInfo>(payload, error);
}

std::optional<std::vector<NodeInfoView>> decode_node_table_views(const Payload& payload, std::string& error) {
  return decode_table<NodeInfoView>(payload, error);
}

Payload encode_text(std::string_view text) {
  return Payload::copy_of(std::as_bytes(std::span(text.data(), text.size())));
}

Payload encode_registration(const Registration& registration) {
  ByteWriter w;
  write_info(w, registration.info);
  w.str(registration.job_digest);
  return w.finish();
}

std::optional<Registration> decode_registration(const Payload& payload, std::string& error) {
  ByteReader r(control_bytes(payload));
  Registration out;
  if (!read_info(r, out.info)) {
    error = r.error().empty() ? "node.role: unknown role" : r.error();
    return std::nullopt;
  }
  if (r.remaining() > 0 && !r.str(out.job_digest, "registration.job_digest")) {
    error = r.error();
    return std::nullopt;
  }
  if (!r.at_end("registration")) {
    error = r.error();
    return std::nullopt;
  }
  return out;
}

Payload encode_refusal(const Refusal& refusal) {
  ByteWriter w;
  w.str(refusal.job_digest);
  w.u32(static_cast<std::uint32_t>(refusal.job_fields.size()));
  for (const auto& [path, value] : refusal.job_fields) {
    w.str(path);
    w.str(value);
  }
  return w.finish();
}

std::optional<Refusal> decode_refusal(const Payload& payload, std::string& error) {
  ByteReader r(control_bytes(payload));
  Refusal out;
  std::uint32_t count = 0;
  if (!r.str(out.job_digest, "refusal.job_digest") || !r.count(count, 8, "refusal.fields")) {
    error = r.error();
    return std::nullopt;
  }
  if (count > kMaxRefusalFields) {
    error =
        "refusal.fields: " + std::to_string(count) + " entries exceeds " + std::to_string(kMaxRefusalFields);
    return std::nullopt;
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    std::string path;
    std::string value;
    if (!r.str(path, "refusal.field.path") || !r.str(value, "refusal.field.value")) {
      error = r.error();
      return std::nullopt;
    }
    out.job_fields.emplace_back(std::move(path), std::move(value));
  }
  if (!r.at_end("refusal")) {
    error = r.error();
    return std::nullopt;
  }
  return out;
}

std::string decode_text(const Payload& payload) {
  const auto bytes = control_bytes(payload);
  return std::string(reinterpret_cast<const char*>(bytes.data()),
                     std::min<std::size_t>(bytes.size(), ByteReader::kMaxString));
}

}  // namespace pstwin
