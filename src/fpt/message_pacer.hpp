// User pacing, a message at a time: a sender writes a paced peer's message whole, then sends that
// peer no more data until the message's bytes have had time to leave at the peer's share of the link
// (fpt::shaped_rate). What the kernel's SO_MAX_PACING_RATE would do, without its habit of letting a
// message out at once after idling and repaying in ~100 ms clumps (docs/FPT.md, "Pacing: the van's
// or the kernel's"). Time is given, never read, so the same rule runs on any clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "core/types.hpp"
#include "fpt/weights.hpp"

namespace pstwin::fpt {

// One paced connection's account: the bytes it still owes at its rate and when it may send again.
struct PacingAccount {
  double debt_bytes = 0;
  double paid_at = 0;
  double held_until = 0;
  // `bytes` just left at `now`: held for bytes / rate plus what it still owed (a late release is not
  // paid back: the debt never goes below zero). `rate` > 0.
  void charge(std::uint64_t bytes, double now, double rate) {
    debt_bytes = std::max(0.0, debt_bytes - (now - paid_at) * rate) + static_cast<double>(bytes);
    paid_at = now;
    held_until = now + debt_bytes / rate;
  }
};

class MessagePacer {
 public:
  explicit MessagePacer(double link_rate_Bps = 0) : link_rate_Bps_(link_rate_Bps) {}

  // Replaces the table at once; `version` must grow (errors as SendPool::set_weights). An empty
  // table: nothing is paced (the load balancer's probe state measures unshaped).
  [[nodiscard]] std::optional<std::string> set_weights(std::uint64_t version,
                                                       std::span<const PeerWeight> weights);

  // A link rate is set: some peer may be paced once a table names it.
  bool active() const { return link_rate_Bps_ > 0; }
  double rate(NodeId peer) const {
    return shaped_rate(link_rate_Bps_, weights_.table(), peer);
  }  // 0: not paced
  // True while `peer`'s data must wait (its last message has not had time to leave at its rate).
  bool held(NodeId peer, double now) const;
  // `bytes` of data just went to `peer` at `now`: a paced peer is charged (PacingAccount::charge).
  void sent(NodeId peer, std::uint64_t bytes, double now);
  // The earliest time after `now` at which a held peer may send again; nullopt if none is held.
  std::optional<double> next_release(double now) const;

 private:
  double link_rate_Bps_;
  CurrentWeights weights_;
  std::map<NodeId, PacingAccount> accounts_;
};

}  // namespace pstwin::fpt
