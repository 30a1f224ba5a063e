#include "fpt/weights.hpp"

#include <algorithm>

namespace pstwin::fpt {

std::optional<std::string> check_weights(std::uint64_t version, std::uint64_t newest,
                                         std::span<const PeerWeight> weights, WeightTable& out) {
  if (version <= newest) {
    return "weights version " + std::to_string(version) + " is not newer than version " +
           std::to_string(newest) + " already given: pass a larger version for every new decision";
  }
  for (const auto& w : weights) {
    if (w.peer == kNoNode)
      return "weights: peer is kNoNode (" + std::to_string(kNoNode) + "): name a real node id";
    if (w.weight == 0 || w.weight > kMaxWeight) {
      return "weights: node " + std::to_string(w.peer) + " has weight " + std::to_string(w.weight) +
             ", must be 1.." + std::to_string(kMaxWeight) + " (0 would starve it; leave it out for 1)";
    }
    if (!out.emplace(w.peer, w.weight).second) {
      return "weights: node " + std::to_string(w.peer) + " is listed twice: list each node once";
    }
  }
  return std::nullopt;
}

std::optional<std::string> CurrentWeights::replace(std::uint64_t version,
                                                   std::span<const PeerWeight> weights) {
  WeightTable table;
  if (auto error = check_weights(version, version_, weights, table)) return error;
  version_ = version;
  table_ = std::move(table);
  return std::nullopt;
}

std::uint32_t weight_of(const WeightTable& table, NodeId peer) {
  const auto it = table.find(peer);
  return it == table.end() ? 1 : it->second;
}

double shaped_rate(double link_rate_Bps, const WeightTable& table, NodeId peer) {
  if (link_rate_Bps <= 0 || peer == kHoldEveryPeer) return 0;
  const auto it = table.find(peer);
  if (it == table.end()) return 0;
  std::uint64_t sum = 0;
  std::uint32_t heaviest = 0;
  for (const auto& [node, weight] : table) {
    if (node == kHoldEveryPeer) continue;
    sum += weight;
    heaviest = std::max(heaviest, weight);
  }
  if (!table.contains(kHoldEveryPeer) && it->second >= kNearHeaviest * heaviest) return 0;
  return link_rate_Bps * it->second / static_cast<double>(sum);
}

}  // namespace pstwin::fpt
