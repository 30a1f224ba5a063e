// Basic vocabulary shared by every layer: node ids, roles, simulated/real seconds.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pstwin {

using NodeId = std::int32_t;
using Seconds = double;  // simulated seconds in the SimGrid backend, wall seconds in the real one

inline constexpr NodeId kNoNode = 0;
inline constexpr NodeId kSchedulerId = 1;

enum class Role : std::uint8_t { kScheduler = 0, kServer = 1, kWorker = 2, kValidator = 3 };

std::string_view role_name(Role role);
// The inverse of role_name; nullopt for any other text.
std::optional<Role> role_from_name(std::string_view name);

// A peer's weight in a node's traffic shaping: its share of the bulk bytes this node sends to its peers
// (send pool) or receives from them (receive shaping) is weight / sum of weights.
struct PeerWeight {
  NodeId peer = kNoNode;
  std::uint32_t weight = 1;  // 1..1,000,000 (fpt::kMaxWeight)
};

// A weight table entry with no node behind it (Runtime::set_send_weights, set_receive_weights): a
// table that lists it (its weight is not counted) holds every peer it names to its share, the heaviest
// too (fpt::shaped_rate). For a node whose peers each exchange the same bytes with it and whose every
// key waits for all of them (a load-balanced server: each worker pushes it the same partitions and
// pulls the same aggregates): a connection running ahead of its share gains nothing there and takes
// the link from one the link's sharing gives less than its share (SimGrid's, by route penalty: a
// slower NIC on the route; TCP's, by round trip), which every key then waits for.
inline constexpr NodeId kHoldEveryPeer = -1;

}  // namespace pstwin
