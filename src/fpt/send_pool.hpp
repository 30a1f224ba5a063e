// FPT's send pool: every message a node sends waits here until the transport asks for the next one.
// Pure logic (no threads, clock or randomness) so the SimGrid backend can run the very same pool.
//
// Order, in three levels:
//  1. Control messages (header-only: acks, pull requests, heartbeats, barriers) bypass everything,
//     across all destinations, in enqueue order.
//  2. Across destinations, deficit round robin (Shreedhar & Varghese 1995): each visit adds
//     quantum_bytes x weight to the destination's deficit; it sends while its head message fits.
//     A message larger than a quantum waits for the deficit to carry over enough rounds.
//  3. Within a destination, higher priority first, then enqueue order (a strict weak ordering on
//     (priority, sequence): ps-lite's P3 van compared with `<=`, which is undefined behaviour).
// Weights are versioned and take effect at the start of the next DRR round, never mid-round.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/message.hpp"
#include "core/types.hpp"
#include "fpt/weights.hpp"

namespace pstwin::fpt {

// The bytes a message costs on the wire: the 64-byte header plus the payload (phantoms count their size).
std::uint64_t wire_bytes(const Message& message);

// Header-only messages are control traffic and bypass DRR (as send_order_key's first field).
bool is_control(const Message& message);

struct SendPoolOptions {
  std::uint64_t quantum_bytes = 64 * 1024;  // DRR quantum of a weight-1 destination
  // The sender's link rate in bytes/s; > 0 turns pacing on (SendPool::pacing_rate).
  double link_rate_Bps = 0;
};

// Per-destination byte accounting (all counts since the pool was made).
struct DestinationStats {
  std::uint64_t queued_messages = 0;
  std::uint64_t queued_bytes = 0;
  std::uint64_t sent_messages = 0;
  std::uint64_t sent_bytes = 0;
  std::uint32_t weight = 1;
};

struct Outgoing {
  NodeId destination = kNoNode;
  Message message;
};

class SendPool {
 public:
  explicit SendPool(SendPoolOptions options = {});

  // Clear error text naming the field if the options are unusable (quantum 0); nullopt if fine.
  static std::optional<std::string> validate(const SendPoolOptions& options);

  // Queues `message` for `destination`. Returns an error (and queues nothing) for kNoNode.
  [[nodiscard]] std::optional<std::string> enqueue(NodeId destination, Message message);

  // The message to send now, or nullopt when nothing is sendable (empty, or every backlogged
  // destination is blocked). Control messages to a blocked destination wait until it is unblocked.
  std::optional<Outgoing> next();

  // Replaces the weights from the next DRR round on. `version` must grow (a stale decision is refused);
  // destinations not listed keep weight 1. A weight of 0 or a duplicate destination is an error.
  [[nodiscard]] std::optional<std::string> set_weights(std::uint64_t version,
                                                       std::span<const PeerWeight> weights);
  std::uint64_t weights_version() const { return active_version_; }  // the version in force now

  // Pacing (options.link_rate_Bps > 0): the rate in bytes/s a connection to `destination` is to be held
  // to, 0 for none: fpt::shaped_rate of the table in force. DRR decides shares only where the pool is
  // the bottleneck; once a message is on the wire the NIC's own sharing takes over. The transport
  // applies the rate (the simulator: a bound on the message's flow; the epoll van: a message at a
  // time, or SO_MAX_PACING_RATE).
  double pacing_rate(NodeId destination) const;

  // A blocked destination (its socket is full) leaves the rotation until unblocked; its messages stay.
  void set_blocked(NodeId destination, bool blocked);
  // A paced destination (a transport holding it to pacing_rate, a message at a time) leaves the
  // rotation the same way, but its control messages still go: an ack or a pull request is not the
  // bytes pacing holds back.
  void set_paced(NodeId destination, bool paced);

  // Removes and returns everything queued for `destination` (its connection is gone), control included.
  std::vector<Message> drop(NodeId destination);

  DestinationStats stats(NodeId destination) const;  // zeros (weight 1) for an unknown destination
  std::uint64_t queued_messages() const { return queued_messages_; }
  bool empty() const { return queued_messages_ == 0; }
  std::uint64_t rounds() const { return rounds_; }  // completed DRR rounds

 private:
  // Strict weak ordering: higher priority first, then lower sequence. Never `<=`.
  struct ByPriorityThenSequence {
    bool operator()(const std::pair<std::int32_t, std::uint64_t>& a,
                    const std::pair<std::int32_t, std::uint64_t>& b) const {
      if (a.first != b.first) return a.first > b.first;
      return a.second < b.second;
    }
  };
  using Queue = std::map<std::pair<std::int32_t, std::uint64_t>, Message, ByPriorityThenSequence>;

  struct Destination {
    Queue data;
    std::uint64_t deficit = 0;
    std::uint32_t weight = 1;
    bool active = false;   // in active_ (backlogged, neither blocked nor paced)
    bool blocked = false;  // the transport cannot take more for it now
    bool paced = false;    // the transport holds its data back for now (set_paced)
    bool visited = false;  // got its quantum in the current visit
    // Blocked in the middle of its visit (the transport took a message and its connection is full):
    // the round it happened in. Unblocked in the same round, it resumes that visit at the front with
    // the deficit it had, so a connection that holds one message at a time (the simulator's) still
    // sends its weight's worth per round instead of one message.
    std::optional<std::uint64_t> interrupted_round;
    DestinationStats stats;
  };

  Destination& destination(NodeId id);
  void follow_holds(NodeId id, Destination& d);  // in or out of the rotation as blocked/paced say
  void activate(NodeId id, Destination& d);
  void end_visit();           // the front destination's visit is over: rotate or retire it
  void start_round_if_due();  // applies pending weights and skips rounds in which nobody could send
  void apply_pending_weights();
  void account_sent(Destination& d, const Message& message);

  SendPoolOptions options_;
  std::map<NodeId, Destination> destinations_;
  // Control messages across destinations: (enqueue sequence) -> (destination, message).
  std::map<std::uint64_t, std::pair<NodeId, Message>> control_;
  std::deque<NodeId> active_;    // DRR rotation; front = destination being visited
  std::size_t visits_left_ = 0;  // visits left in the current round
  std::uint64_t next_sequence_ = 0;
  std::uint64_t queued_messages_ = 0;
  std::uint64_t rounds_ = 0;
  std::uint64_t active_version_ = 0;
  std::optional<std::pair<std::uint64_t, WeightTable>> pending_weights_;
  WeightTable weights_;  // the weights in force
};

}  // namespace pstwin::fpt
