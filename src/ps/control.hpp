// Bodies of control messages (register, node table, fatal), encoded little-endian into payloads.
// Decoding is bounds-checked and names the field that is wrong; it never trusts a length.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/payload.hpp"
#include "core/types.hpp"

namespace pstwin {

struct NodeInfo {
  NodeId id = kNoNode;
  Role role = Role::kWorker;
  std::int32_t rank = -1;  // -1 in a registration: let the scheduler choose
  std::string address;     // transport address ("host:port" for real, "worker0@h1" in simulation)
  std::string host;        // host name: nodes on one host share staging memory

  friend bool operator==(const NodeInfo&, const NodeInfo&) = default;
};

Payload encode_node_info(const NodeInfo& info);
Payload encode_node_table(const std::vector<NodeInfo>& table);

// On failure these return nullopt and set `error` to "field: what is wrong".
std::optional<NodeInfo> decode_node_info(const Payload& payload, std::string& error);
std::optional<std::vector<NodeInfo>> decode_node_table(const Payload& payload, std::string& error);
std::string decode_text(const Payload& payload);

}  // namespace pstwin
