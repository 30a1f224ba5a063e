// The weight tables of FPT's traffic shaping, shared by the send pool (a node's outgoing bytes) and
// the receive shaper (its incoming bytes), and the one rule both use to turn a table into rates.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "core/types.hpp"

namespace pstwin::fpt {

inline constexpr std::uint32_t kMaxWeight = 1'000'000;

using WeightTable = std::map<NodeId, std::uint32_t>;  // peer -> weight; unlisted peers weigh 1

// Checks a table given as `version` when `newest` is the newest already taken (versions must grow):
// each peer once, weights 1..kMaxWeight. Fills `out`; an error text naming the entry otherwise.
[[nodiscard]] std::optional<std::string> check_weights(std::uint64_t version, std::uint64_t newest,
                                                       std::span<const PeerWeight> weights, WeightTable& out);

std::uint32_t weight_of(const WeightTable& table, NodeId peer);

// A table replaced whole by each newer version, at once (the receive shaper, the message pacer; the
// send pool defers a new table to its next round instead).
class CurrentWeights {
 public:
  // `version` must grow; errors as check_weights, and the table in force stays.
  [[nodiscard]] std::optional<std::string> replace(std::uint64_t version,
                                                   std::span<const PeerWeight> weights);
  const WeightTable& table() const { return table_; }
  std::uint64_t version() const { return version_; }

 private:
  std::uint64_t version_ = 0;
  WeightTable table_;
};

// The rate in bytes/s the traffic with `peer` is held to on a link of `link_rate_Bps`, 0 for none: a
// peer the table names with less than kNearHeaviest of its heaviest weight gets link rate x weight /
// sum of the table's weights; the heaviest and those near it, unlisted peers, an empty table or no
// link rate are not limited (where the table lists kHoldEveryPeer, core/types.hpp, the heaviest are
// limited too and that entry counts in no sum). Near the heaviest: a cap at a share the free-running
// connections get anyway only takes away the room to catch up after a stall (lb_4w4s_netns, weights 984 and
// 1000: the capped servers' links 94 % busy against 97 % without; docs/FPT.md "Pacing: the van's or the
// kernel's").
// Why: a link shares itself equally among its connections (TCP, one flow per connection in the
// simulator) whatever each has to carry. Capped at their shares, the light connections leave the
// heavy ones the rest, and the heaviest (unlimited) take up whatever a capped one leaves unused.
inline constexpr double kNearHeaviest = 0.9;
double shaped_rate(double link_rate_Bps, const WeightTable& table, NodeId peer);

}  // namespace pstwin::fpt
