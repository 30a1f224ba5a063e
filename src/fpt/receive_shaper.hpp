// Receive-side shaping for the many-to-one case (FPT v2.5): several peers send to one node and share
// its downlink. Each sender's pool shapes only its own uplink and cannot know who else sends here, and
// the downlink splits itself equally among the connections, so a peer with little to deliver takes
// bandwidth one with much needs. The receiver holds each peer lighter than its heaviest to its
// weight's share of its link (fpt::shaped_rate, the send pool's pacing rule): the epoll van reads such
// a connection no faster (TokenBucket; TCP's flow control then slows the sender), the simulator bounds
// that peer's flows. An empty table turns shaping off, as the load balancer's probe state wants:
// bandwidth is to be measured unshaped.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/types.hpp"
#include "fpt/weights.hpp"

namespace pstwin::fpt {

// The epoll van's reader bucket for a shaped connection: 10 ms at its rate, at least 128 KB, what a
// reader may take at once after idling; out of tokens it sleeps until half is back (at most ~200
// wake-ups a second). The FIFO twin's "epoll" host delays deliveries by the same bucket.
inline constexpr double kReaderBurstSeconds = 0.01;
inline constexpr double kReaderBurstMinBytes = 128 * 1024;

class ReceiveShaper {
 public:
  explicit ReceiveShaper(double link_rate_Bps = 0) : link_rate_Bps_(link_rate_Bps) {}

  // Replaces the table at once (a receiver cannot defer: bytes already in flight are not its to order).
  // `version` must grow; errors as SendPool::set_weights. An empty table: no shaping.
  [[nodiscard]] std::optional<std::string> set_weights(std::uint64_t version,
                                                       std::span<const PeerWeight> weights);

  double rate(NodeId sender) const {
    return shaped_rate(link_rate_Bps_, weights_.table(), sender);
  }  // 0: none
  std::uint64_t version() const { return weights_.version(); }

 private:
  double link_rate_Bps_;
  CurrentWeights weights_;
};

// Bytes a rate-limited reader may take now. Time comes in as seconds from the caller's clock, so the
// logic has none of its own. Starts full; holds at most `depth` bytes (the burst a reader may take
// after idling).
class TokenBucket {
 public:
  TokenBucket(double rate_Bps, double depth_bytes, double now_s);
  void refill(double now_s);
  std::uint64_t available() const;
  void take(std::uint64_t bytes);                   // never below zero
  double seconds_until(std::uint64_t bytes) const;  // until available() >= bytes (0: now)
  double rate() const { return rate_Bps_; }
  double depth() const { return depth_bytes_; }

 private:
  double rate_Bps_;
  double depth_bytes_;
  double tokens_;
  double last_s_;
};

}  // namespace pstwin::fpt
