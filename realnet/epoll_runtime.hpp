// The real-network backend over FPT's epoll TCP transport (the "epoll" van, DMLC_PS_VAN_TYPE=epoll):
// one EpollNodeRuntime per protocol node. The transport runs without threads of its own: the
// node's event loop (LoopRuntime) sleeps in its epoll set, reads frames straight into the
// messages' buffers and hands them to the protocol, and writes what the protocol sent through the
// send pool (control first, DRR across peers by weight, priority then order within a peer) with one
// sendmsg per batch. A message crosses no thread between the protocol and the kernel. Threads per
// node: the event loop and one per executor lane.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fpt/send_pool.hpp"
#include "realnet/epoll_transport.hpp"
#include "realnet/loop_runtime.hpp"

namespace pstwin::realnet {

class EpollNodeRuntime final : public LoopRuntime {
 public:
  // Binds and listens before returning; throws BindError if it cannot.
  EpollNodeRuntime(LocalHost& host, Options options);
  ~EpollNodeRuntime() override;

  void set_self(NodeId id) override;
  // DRR weights of the send pool by destination, from the next round on (see fpt::SendPool).
  [[nodiscard]] std::optional<std::string> set_weights(std::uint64_t version,
                                                       std::span<const PeerWeight> weights);
  // The protocol's table (an LB decision's bytes per destination) becomes the pool's DRR weights.
  void set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) override;
  // ... and the receive shaping's (fpt::ReceiveShaper at PSTWIN_NIC_RATE; without it nothing is shaped).
  void set_receive_weights(std::uint64_t version, std::span<const PeerWeight> weights) override;
  fpt::DestinationStats stats(NodeId peer) const { return transport_->stats(peer); }
  // Transport errors seen (a member's malformed frame, a member closing mid-frame, a connection
  // lost): before the node stops, each fails it, naming the peer. What a non-member sends, and a
  // member's forged or misrouted message, is refused instead (refusals()) and the node goes on.
  std::uint64_t transport_errors() const { return transport_errors_.load(); }

 private:
  // A peer we cannot send to now: its listener refused us (its process is not up yet), or our
  // connection to it was lost (TransportError::lost). Its messages are held in order, up to
  // kHeldBytes / kHeldMessages (beyond that they are dropped and counted, as ZeroMQ's high-water mark
  // drops), and its listener is tried again on a timer, backing off to once a second; a lost peer
  // only while something is held for it. Whether the peer is dead is for the heartbeats to say: the
  // protocol's connect timeout bounds the first wait, the scheduler's heartbeat timeout a lost peer.
  struct Pending {
    std::string host;
    std::uint16_t port = 0;
    std::deque<Message> held;
    std::uint64_t held_bytes = 0;
    bool lost = false;          // connected once: retried only while something is held
    double retry_after_s = 0;   // backoff
    double next_try = 0;        // now() of the next attempt
    std::uint64_t dropped = 0;  // messages over the bound, since the connection was lost
  };
  static constexpr std::uint64_t kHeldBytes = 256ull << 20;
  static constexpr std::size_t kHeldMessages = 16384;

  void bind_peer(NodeId id, const std::string& address) override;
  void queue(Message message) override;
  void receive() override {}  // wait() delivers what arrives
  void flush() override;
  void wait(long timeout_ms) override;
  void wake() override;
  int pool_fd() const override { return transport_->poll_fd(); }
  void arm_pool_timer(long timeout_ms) override;

  void on_frame(Message message);
  void on_error(const TransportError& error);
  bool try_connect(NodeId id, Pending& pending);  // false: still refused; fails the node on other errors
  void retry_pending();
  void arm_retry();
  void hand_over(Message message);
  void hold(Pending& pending, NodeId peer, Message message);
  // Lost connections the transport reported: each peer's queue moves to pending_ and is retried.
  void settle_lost();
  // "server 0 (node 8 at 127.0.0.1:5001)": a peer as the scheduler's failure texts name it.
  std::string describe_peer(NodeId id, const std::string& address) const;

  std::unique_ptr<EpollTransport> transport_;
  std::map<NodeId, std::string> connected_;  // peer -> address of our open connection
  std::map<NodeId, Pending> pending_;
  std::vector<NodeId> lost_;  // reported by the transport, not yet settled
  bool retry_armed_ = false;
  // On a LoopPool: a timerfd in the transport's epoll set for the loop's timers and the transport's
  // own deadlines, and when it is due (steady-clock ms; 0: disarmed or already fired).
  FileDescriptor pool_timer_;
  std::int64_t pool_timer_due_ms_ = 0;
  std::atomic<std::uint64_t> transport_errors_ = 0;
};

}  // namespace pstwin::realnet
