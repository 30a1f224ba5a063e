// ps.resend: at-least-once delivery made exactly-once, as ps-lite's Resender (src/resender.h), below
// every protocol role and above either backend. A Resender is the Runtime its protocol node sees and
// the Node its backend drives:
//
//  - every message the node sends (but heartbeats, which the next one replaces, and registration,
//    sent before the node has an id) is kept until the receiver acknowledges it, and sent again under
//    the same signature (sender, sequence) every ps.resend_timeout until then;
//  - every such message received is acknowledged (kAck, key = its sequence) before it is handled, and
//    handled only the first time: a second copy (a duplicate, or a resend whose ack was lost) is
//    dropped and acknowledged again;
//  - a message unacknowledged for ps.heartbeat_timeout + 2 x ps.heartbeat_interval fails the run
//    naming it: a dead peer is the scheduler's to declare first (it may let the job go on without a
//    worker, ps.on_worker_loss); messages to a worker declared lost are forgotten; a node that stops lingers
//    until what it sent is acknowledged (its peer may have stopped meanwhile: then it gives up after a few
//    resends), so a lost shutdown ack does not hang the job.
//
// Costs: one ack per message, a timer per unacknowledged message, and a copy of each live (zero-copy)
// payload taken at send time, since a resend must carry what was sent, not what the staging buffer
// holds later.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "core/runtime.hpp"
#include "ps/faults.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

class Resender final : public Runtime, public Node {
 public:
  struct Options {
    Seconds timeout = 1;         // ps.resend_timeout
    Seconds give_up_after = 12;  // ps.heartbeat_timeout + 2 x ps.heartbeat_interval
    std::string label;           // "worker 1", for failure texts
    // ps.on_worker_loss = "continue": a worker that stays silent is the scheduler's to declare lost
    // (then its messages are forgotten), never this layer's, however long its notice takes to come
    // through message loss.
    bool workers_may_be_lost = false;
  };
  // How many distinct messages per sender the receiver remembers. A message older than all of them is
  // taken as a copy: resends come within give_up_after, far fewer messages than this later.
  static constexpr std::size_t kSeenWindow = 8192;
  // Resends of a message still unacknowledged when its node stops before it gives up on it.
  static constexpr int kLingerResends = 3;

  Resender(Runtime& inner, Options options);
  void wrap(std::unique_ptr<Node> protocol) { protocol_ = std::move(protocol); }
  const FaultCounts& counts() const { return counts_; }

  // Node: what the backend drives.
  void start() override { protocol_->start(); }
  void on_message(Message message) override;
  // The protocol's last word (its fatal notice) goes out through this layer like any message.
  void on_failing(std::string_view why) override { protocol_->on_failing(why); }
  std::string describe_state() const override;

  // Runtime: what the protocol node sees; all but send and stop pass through.
  NodeId self() const override { return inner_.self(); }
  void set_self(NodeId id) override { inner_.set_self(id); }
  std::string local_address() const override { return inner_.local_address(); }
  std::string host_name() const override { return inner_.host_name(); }
  void connect(NodeId id, std::string_view address) override { inner_.connect(id, address); }
  void send(Message message) override;
  std::uint64_t next_sequence() override { return inner_.next_sequence(); }
  void send_numbered(Message message) override { inner_.send_numbered(std::move(message)); }
  void set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) override {
    inner_.set_send_weights(version, weights);
  }
  void set_receive_weights(std::uint64_t version, std::span<const PeerWeight> weights) override {
    inner_.set_receive_weights(version, weights);
  }
  Seconds now() const override { return inner_.now(); }
  TimerId start_timer(Seconds delay, std::function<void()> fire) override {
    return inner_.start_timer(delay, std::move(fire));
  }
  void cancel_timer(TimerId id) override { inner_.cancel_timer(id); }
  RandomStream& random(std::string_view purpose) override { return inner_.random(purpose); }
  Executor& executor(std::string_view name, int lanes) override { return inner_.executor(name, lanes); }
  StagingArea& staging() override { return inner_.staging(); }
  void trace_span(std::string_view category, std::string_view name, Seconds start, Seconds end) override {
    inner_.trace_span(category, name, start, end);
  }
  void trace_tagged(std::string_view lane, std::string_view category, std::string_view name, Seconds start,
                    Seconds end, const SpanTags& tags) override {
    inner_.trace_tagged(lane, category, name, start, end, tags);
  }
  void log(std::string_view text) override { inner_.log(text); }
  void stop() override;
  void fail(std::string text) override { inner_.fail(std::move(text)); }
  void fail_configuration(std::string text) override { inner_.fail_configuration(std::move(text)); }

 private:
  struct Pending {
    Message message;  // as first sent (payload frozen), resent verbatim
    Seconds first_sent = 0;
    int resends = 0;
    TimerId timer = 0;
  };
  // What one sender's messages this node has handled: the newest kSeenWindow sequences, and below
  // `floor` everything.
  struct Seen {
    std::set<std::uint64_t> recent;
    std::uint64_t floor = 0;
  };

  static bool tracked(const MessageHeader& header);
  static bool accepted_registration(const MessageHeader& header);
  void acknowledge(const MessageHeader& header);
  bool first_time(const MessageHeader& header);  // records it
  void acked(std::uint64_t sequence);
  void timed_out(std::uint64_t sequence);
  void maybe_stop();
  // A worker declared lost (kWorkerLost): what was sent to it is dropped, later sends go untracked.
  void forget(NodeId peer);

  Runtime& inner_;
  Options options_;
  std::unique_ptr<Node> protocol_;
  std::map<std::uint64_t, Pending> pending_;  // by sequence
  std::map<NodeId, Seen> seen_;
  std::set<NodeId> lost_;
  FaultCounts counts_;
  bool stop_requested_ = false;
  bool stopped_ = false;
};

// Adds what `node`'s Resender did (resent, duplicates dropped, acks, given up) to `into`; nothing if
// `node` is not one. Read after the node's event loop has ended.
void add_resend_counts(const Node* node, FaultCounts& into);

// The protocol node `make` builds on `rt`, behind a Resender when the scenario's ps.resend is on.
std::unique_ptr<Node> with_resend(Runtime& rt, const Scenario& scenario, std::string label,
                                  const std::function<std::unique_ptr<Node>(Runtime&)>& make);

}  // namespace pstwin
