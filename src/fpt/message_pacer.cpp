#include "fpt/message_pacer.hpp"

namespace pstwin::fpt {

std::optional<std::string> MessagePacer::set_weights(std::uint64_t version,
                                                     std::span<const PeerWeight> weights) {
  return weights_.replace(version, weights);
}

bool MessagePacer::held(NodeId peer, double now) const {
  if (rate(peer) <= 0) return false;  // a lifted or heavy peer waits for no earlier message
  const auto it = accounts_.find(peer);
  return it != accounts_.end() && it->second.held_until > now;
}

void MessagePacer::sent(NodeId peer, std::uint64_t bytes, double now) {
  const double peer_rate = rate(peer);
  if (peer_rate <= 0) return;
  accounts_[peer].charge(bytes, now, peer_rate);
}

std::optional<double> MessagePacer::next_release(double now) const {
  std::optional<double> earliest;
  for (const auto& [peer, account] : accounts_)
    if (account.held_until > now && rate(peer) > 0 && (!earliest || account.held_until < *earliest))
      earliest = account.held_until;
  return earliest;
}

}  // namespace pstwin::fpt
