// Bodies of control messages (register, node table, fatal), encoded little-endian into payloads.
// Decoding is bounds-checked and names the field that is wrong; it never trusts a length.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
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

// A node table entry whose strings view the payload it was read from: every node reads the whole
// table (8,256 entries at 8,192 workers), and copying each entry was most of a simulated cluster's
// registration.
struct NodeInfoView {
  NodeId id = kNoNode;
  Role role = Role::kWorker;
  std::int32_t rank = -1;
  std::string_view address;
  std::string_view host;
};

Payload encode_node_info(const NodeInfo& info);
Payload encode_node_table(const std::vector<NodeInfo>& table);

// On failure these return nullopt and set `error` to "field: what is wrong".
std::optional<NodeInfo> decode_node_info(const Payload& payload, std::string& error);
std::optional<std::vector<NodeInfo>> decode_node_table(const Payload& payload, std::string& error);
// The same checks as decode_node_table; the views are valid while `payload` lives.
std::optional<std::vector<NodeInfoView>> decode_node_table_views(const Payload& payload, std::string& error);
std::string decode_text(const Payload& payload);
Payload encode_text(std::string_view text);

// kRegister: who the node is and the digest of the job it was configured for (job_digest, src/scenario).
// A registration without the digest (a bare NodeInfo) decodes with an empty one.
struct Registration {
  NodeInfo info;
  std::string job_digest;
};
Payload encode_registration(const Registration& registration);
std::optional<Registration> decode_registration(const Payload& payload, std::string& error);

// The scheduler's answer to a registration (a kRegister response; its header key says which).
inline constexpr std::uint64_t kRegistrationAccepted = 0;  // no body: wait for the node table
inline constexpr std::uint64_t kRegistrationRefused = 1;   // body: a Refusal

// A registration refused for another job's scenario: the job's digest and fields (job_fields), so the
// refused node can name the fields its own scenario sets differently.
struct Refusal {
  std::string job_digest;
  std::vector<std::pair<std::string, std::string>> job_fields;
};
Payload encode_refusal(const Refusal& refusal);
std::optional<Refusal> decode_refusal(const Payload& payload, std::string& error);

}  // namespace pstwin
