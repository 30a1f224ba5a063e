#include "fpt/message_pacer.hpp"

namespace pstwin::fpt {

std::optional<std::string> MessagePacer::set_weights(std::uint64_t version,
                                                     std::span<const PeerWeight> weights) {
  if (auto error = weights_.replace(version, weights)) return error;
  // A peer the new table no longer paces (lifted, or now near the heaviest) waits for no earlier
  // message: only paced peers keep an account, so held() and next_release() need not ask.
  std::erase_if(accounts_, [this](const auto& entry) { return rate(entry.first) <= 0; });
  return std::nullopt;
}

bool MessagePacer::held(NodeId peer, double now) const {
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
    if (account.held_until > now && (!earliest || account.held_until < *earliest))
      earliest = account.held_until;
  return earliest;
}

}  // namespace pstwin::fpt
