// The simulated deployment: one SimNode (a Runtime) per protocol node, each driven by an actor;
// one actor per executor lane; one ordered stream per connection, as TCP or ZeroMQ give one ordered
// byte stream per peer pair (driven by the flow network's callbacks, or by an actor per stream with
// SimGrid's network model). Messages are delivered in SimNode::deliver.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <boost/container/flat_map.hpp>
#include <simgrid/s4u.hpp>

#include "core/codec.hpp"
#include "core/runtime.hpp"
#include "core/send_order.hpp"
#include "core/timer_queue.hpp"
#include "fpt/receive_shaper.hpp"
#include "fpt/send_pool.hpp"
#include "ps/faults.hpp"
#include "report/breakdown.hpp"
#include "report/link_timeline.hpp"
#include "report/run_report.hpp"
#include "sim/message_network.hpp"
#include "sim/platform.hpp"
#include "sim/shared_cores.hpp"
#include "sim/wakeup.hpp"

namespace pstwin::sim {

class Cluster;
class SimNode;

// A set of small integers kept as sorted, disjoint half-open ranges: the ids a node bound, by their
// slots in the cluster's address book. A node table binds its ids in the order the book first saw
// them, so a node holds one or two ranges however many peers it could reach.
class SlotRanges {
 public:
  void insert(std::uint32_t slot);
  bool contains(std::uint32_t slot) const;
  std::size_t ranges() const { return ranges_.size(); }

 private:
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges_;  // [first, end)
};

// Which node answers at a node id, for all nodes of one simulated cluster. The protocol binds every
// id of the node table on every node (ps-lite's Van::Connect): kept per node, that was nodes squared
// pairs. The book keeps each id once, at the address its first binding named; a node keeps only
// which ids it bound (SlotRanges) and the rare binding that names another address, and resolves an id
// to its peer on its first send to it.
class AddressBook {
 public:
  struct Entry {
    std::uint32_t slot = 0;  // dense, in the order ids were first bound
    std::string address;
    SimNode* node = nullptr;  // the node at `address`: the run's nodes exist before any binding
  };
  const Entry* find(NodeId id) const {
    if (id >= 0 && id < kDenseIds) {
      const auto index = static_cast<std::size_t>(id);
      return index < dense_.size() && dense_[index] > 0 ? &entries_[dense_[index] - 1] : nullptr;
    }
    const auto it = sparse_.find(id);
    return it == sparse_.end() ? nullptr : &entries_[it->second];
  }
  const Entry& add(NodeId id, std::string_view address, SimNode& node);

 private:
  // Every node looks up every id of the node table: ids below this (the scheduler, servers and
  // workers) index a vector; the others (validators, the scheduler's registrant ids) a hash map,
  // looked up and never iterated, so no hash order leaks.
  static constexpr NodeId kDenseIds = NodeId{1} << 20;
  std::vector<std::uint32_t> dense_;  // by id: slot + 1, 0 if unbound
  std::unordered_map<NodeId, std::uint32_t> sparse_;
  std::deque<Entry> entries_;  // by slot; a deque keeps them in place as the book grows
};

// A node's limit on bulk flows in transmission (sim.node_flow_limit; 0: none), for senders that
// have no actor: a stream waiting for a slot is called back, first come first served.
class FlowSlots {
 public:
  explicit FlowSlots(int limit) : free_(limit), limited_(limit > 0) {}
  // Runs `go` now if a slot is free (without wrapping it in a std::function), else when one is.
  template <class Go>
  void acquire(Go&& go) {
    if (!limited_ || free_ > 0) {
      if (limited_) --free_;
      go();
      return;
    }
    waiting_.emplace_back(std::forward<Go>(go));
  }
  void release();

 private:
  int free_;
  bool limited_;
  std::deque<std::function<void()>> waiting_;
};

// One connection's stream: messages leave one at a time. Like a send pool in front of a socket
// (ps-lite's P3 van, FPT's pool), it sends control messages (no payload: acks, pull requests)
// before queued bulk data, then by priority, then in send order: equal messages keep FIFO order.
// With the flow model it has no actor: the flow network's callbacks move it from one message to
// the next. With SimGrid's model an actor per stream blocks in s4u::Comm::sendto.
class Stream {
 public:
  Stream(SimNode& from, SimNode& to, NodeId to_id);
  void enqueue(Message message);
  // The send pool's pacing rate for the bulk message it hands over next (0: none; SendPool::pacing_rate).
  void set_pacing(double rate_Bps) { pacing_Bps_ = rate_Bps; }

 private:
  void run();           // SimGrid's model: the stream's actor
  void next();          // flow model: start the next queued message, if idle
  void send_current();  // flow model: after the jitter
  void begin();         // the transport takes `current_`: its bytes are fixed now
  void arrive();        // `current_` reached the peer
  // To the peer, which reads it no earlier than `read_end` (its bytes' receive cost); false: refused.
  bool deliver(Message message, const HeaderBytes& header, Seconds start, Seconds read_end);
  Seconds send_cpu_wait();  // [cpu]: how long `current_` waits for its send cost on the node's net lane
  Seconds clog_wait();      // faults.clog: how long the message starting now waits (counted)
  // sim.fifo_host "epoll"/"kernel-pacing": seconds from a message's arrival until the receiver's
  // shaping lets it be read (the epoll van's token bucket, fpt::kReaderBurst*), in arrival order.
  double reader_delay(double bytes);
  double control_latency();                 // a header-only message's cost: the route's latency
  double route_latency();                   // the route's one-way latency (x the latency factor)
  void measure_route();                     // sets both latencies above
  void transmit(std::uint64_t wire_bytes);  // SimGrid's model: blocks the stream's actor
  SimNode& from_;
  SimNode& to_;
  NodeId to_id_;
  std::string lane_name_;
  double control_latency_ = -1;  // one-way latency of a header-only message on this route, once known
  double route_latency_ = -1;    // the route's one-way latency, once known
  double pacing_Bps_ = 0;        // bulk messages' rate bound (send pool pacing), 0: none
  double reader_tokens_ = -1;    // reader_delay's bucket (-1: not started, full at first use)
  double reader_at_ = 0;         // ... brought up to date then
  double reader_free_at_ = 0;    // the last message read no earlier than this
  std::map<SendOrderKey, Message> queue_;
  bool busy_ = false;  // flow model: `current_` is in transmission
  Message current_;
  HeaderBytes header_{};
  Seconds start_ = 0;
  Seconds read_end_ = 0;          // [cpu]: when the receiver has read `current_`'s bytes (0: not charged)
  simgrid::s4u::MutexPtr mutex_;  // SimGrid's model only
  simgrid::s4u::ConditionVariablePtr ready_;
};

class SimExecutor final : public Executor {
 public:
  SimExecutor(SimNode& node, std::string name, int lanes);
  int lanes() const override { return static_cast<int>(lanes_.size()); }
  void submit(int lane, std::string_view label, ComputeCost cost, std::function<void()> work,
              std::function<void()> done) override;
  void submit_tagged(int lane, std::string_view label, ComputeCost cost, std::function<void()> work,
                     std::function<void()> done, SpanTags tags) override;

 private:
  // A lane's actor suspends itself when it has nothing to run and is resumed by the next submit: the
  // same yields, in the same order of actors, as waiting on a condition variable (a resume puts the
  // lane in SimGrid's run list ahead of the submitter, as a notify does; a submit to a busy lane is a
  // plain yield, as a notify nobody waits for is), without the mutex reacquisition, wait record and
  // CPU sleep action SimGrid allocates for each wait.
  struct Lane {
    std::string name;
    std::deque<Task> tasks;
    simgrid::s4u::ActorPtr actor;
    bool parked = false;  // the lane's actor suspended itself (resumed, it runs soon and clears this)
  };
  void run_lane(Lane& lane);
  static void wake(Lane& lane);
  SimNode& node_;
  std::string name_;
  std::vector<std::unique_ptr<Lane>> lanes_;
};

class HostStaging final : public StagingArea {
 public:
  std::shared_ptr<ByteBuffer> open(std::string_view name, std::size_t bytes) override;

 private:
  std::map<std::string, std::shared_ptr<ByteBuffer>, std::less<>> regions_;
};

class SimNode final : public Runtime {
 public:
  SimNode(Cluster& cluster, std::string label, std::string address, std::string host);

  void attach(std::unique_ptr<Node> protocol) { protocol_ = std::move(protocol); }
  const Node* protocol() const { return protocol_.get(); }
  // Before spawn, when an actor will wait_stopped(): the loop then holds mutex_ while it runs and
  // waits on a condition variable, whose hand-overs of mutex_ order that actor's steps.
  void expect_watcher() { watched_ = true; }
  void spawn(Seconds start_delay);
  // A message arrived from the network; its bytes are read by `read_end` (booked by the sender's stream).
  void deliver(Message message, Seconds read_end = 0);
  void post(std::function<void()> event);  // run on this node's event loop
  bool stopped() const { return stopped_; }
  // Parks the calling actor until this node stopped.
  void wait_stopped();
  // faults.crashes: the node stops dead, as under kill -9: it handles, sends and answers nothing more.
  void crash();
  bool crashed() const { return crashed_; }
  std::string describe() const;
  const std::string& label() const { return label_; }
  int pid() const { return pid_; }
  simgrid::s4u::Host* host() const { return host_; }
  simgrid::s4u::SemaphorePtr flow_slots() const { return flow_slots_; }  // null: no limit (or flow model)
  FlowSlots& flow_queue() { return flow_queue_; }                        // the flow model's slots
  Cluster& cluster() { return cluster_; }

  // Runtime
  NodeId self() const override { return self_; }
  void set_self(NodeId id) override;
  std::string local_address() const override { return address_; }
  std::string host_name() const override { return host_name_; }
  int host_slot() const { return host_slot_; }
  // Binds `id` in the cluster's address book; no peer state until the first send to it.
  void connect(NodeId id, std::string_view address) override;
  void send(Message message) override;
  std::uint64_t next_sequence() override { return next_sequence_++; }
  void send_numbered(Message message) override;
  void set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) override;
  void set_receive_weights(std::uint64_t version, std::span<const PeerWeight> weights) override;
  Seconds now() const override;
  TimerId start_timer(Seconds delay, std::function<void()> fire) override;
  void cancel_timer(TimerId id) override;
  RandomStream& random(std::string_view purpose) override;
  Executor& executor(std::string_view name, int lanes) override;
  StagingArea& staging() override;
  void trace_span(std::string_view category, std::string_view name, Seconds start, Seconds end) override;
  void trace_tagged(std::string_view lane, std::string_view category, std::string_view name, Seconds start,
                    Seconds end, const SpanTags& tags) override;
  void log(std::string_view text) override;
  void stop() override;
  void fail(std::string text) override;

  void trace_lane(std::string_view lane, std::string_view category, std::string_view name, Seconds start,
                  Seconds end, const std::optional<TraceMessage>& message = std::nullopt);
  // [cpu]: runs `cost` seconds of the van's work on this node's net lane after what it already holds
  // (serial, in the order charged), starting at `earliest` at the soonest; returns when that work ends.
  Seconds charge_net(std::string_view what, Seconds cost, const TraceMessage& message, Seconds earliest = 0);
  // A stream delivered a message to `to` (with sim.send_pool_slots: a bulk one frees its slot).
  void transmitted(NodeId to, bool bulk);
  // Receive shaping: the rate bound on bulk flows from `sender` to this node (0: none).
  double receive_rate(NodeId sender) const { return receive_shaper_ ? receive_shaper_->rate(sender) : 0; }

 private:
  void run();
  void wake();                     // the loop has an event or a timer
  SimNode* peer(NodeId id) const;  // the node this one bound `id` to, null if none
  Stream& stream_to(NodeId to);
  void pump();  // send pool: bulk messages to idle connections while slots are free

  Cluster& cluster_;
  std::string label_;
  std::string address_;
  std::string host_name_;
  simgrid::s4u::Host* host_;
  int host_slot_;
  int pid_;
  NodeId self_ = kNoNode;
  std::unique_ptr<Node> protocol_;
  bool stopped_ = false;
  bool crashed_ = false;
  bool started_ = false;
  // Run in the order posted. A delivered message waits as itself, not inside a closure: a closure
  // holding a Message is too large for std::function's own buffer, an allocation per message.
  std::deque<std::variant<std::function<void()>, Message>> events_;
  TimerQueue timers_;
  std::uint64_t next_sequence_ = 1;
  Seconds net_free_at_ = 0;       // charge_net: the net lane is busy until then
  SharedCores* cores_ = nullptr;  // cpu.shared_cores: what the net lane runs on (null: a core of its own)
  bool watched_ = false;          // expect_watcher(): mutex_ and wake_ instead of wakeup_
  Wakeup wakeup_;
  simgrid::s4u::MutexPtr mutex_;
  simgrid::s4u::ConditionVariablePtr wake_;
  simgrid::s4u::ConditionVariablePtr stopped_changed_;
  simgrid::s4u::SemaphorePtr flow_slots_;
  FlowSlots flow_queue_;
  // Every node binds every id of the node table: which ones, as ranges of address-book slots, and
  // those it bound to an address other than the book's (none in pstwin's protocol). A peer's stream
  // exists once this node sent to it.
  SlotRanges bound_;
  boost::container::flat_map<NodeId, SimNode*> own_bindings_;
  std::unordered_map<NodeId, std::unique_ptr<Stream>> streams_;  // looked up, never iterated
  // sim.send_pool_slots > 0: bulk messages wait here (control ones go straight to their stream, which
  // sends them first anyway); each connection has at most one in transmission, the node `slots`.
  std::unique_ptr<fpt::SendPool> pool_;
  int pool_in_flight_ = 0;
  // With the pool and the flow model: FPT's receive-side shaping, applied by the senders' streams as a
  // bound on each flow into this node (what the epoll van's rate-limited reads make TCP do).
  std::unique_ptr<fpt::ReceiveShaper> receive_shaper_;
  std::map<std::string, RandomStream, std::less<>> randoms_;
  std::map<std::string, std::unique_ptr<SimExecutor>, std::less<>> executors_;
};

class Cluster {
 public:
  Cluster(const Scenario& scenario, Platform& platform);

  SimNode& add_node(std::string label, std::string address, const std::string& host);
  SimNode* find(std::string_view address);
  AddressBook& address_book() { return address_book_; }
  const Scenario& scenario() const { return scenario_; }
  std::uint64_t seed() const { return scenario_.seed; }
  HostStaging& staging(const std::string& host) { return staging_[host]; }
  simgrid::s4u::Host* host(const std::string& name) const { return platform_.hosts.at(name); }
  // A host's number, dense from 0, for per-message lookups that should not compare names.
  int host_slot(const std::string& name);
  // cpu.shared_cores: the cores of the host in `slot` (or of the machine every host runs on, with
  // cpu.core_scope = "machine"); null when the scenario does not share cores.
  SharedCores* shared_cores(int slot);
  double latency_factor() const { return platform_.latency_factor; }
  // What one flow can get out of `host`'s NIC: its bandwidth x the model's bandwidth factor, less the
  // reverse traffic's cross-traffic share (a send pool's link rate, for pacing).
  double uplink_rate(const std::string& host) const;
  // pstwin's own network model (sim.network_model "flow" or "fifo"); null: SimGrid shares bandwidth.
  MessageNetwork* network() { return network_.get(); }

  // A message of `bytes` on the wire from `start` to `end`: counted on every link it crossed.
  void account(const SimNode& from, const SimNode& to, Command command, std::uint64_t bytes, Seconds start,
               Seconds end);
  // `span` on `lane` of process `pid`: to the sink, and to trace.json if output.trace keeps it.
  void record_span(const SpanView& span, int pid, std::string_view lane);
  // Sees every span, before output.trace and its cap decide whether trace.json keeps it.
  void set_span_sink(std::function<void(const SpanView&)> sink) { span_sink_ = std::move(sink); }
  void progress() { last_progress_ = simgrid::s4u::Engine::get_clock(); }
  void fail(const std::string& who, const std::string& text);
  // Called by a node that fails, instead of ending every actor (the run's end then is the handler's):
  // for actors that cannot be ended from outside, as the simulated threads of ps-lite applications.
  void set_failure_handler(std::function<void()> handler) { failure_handler_ = std::move(handler); }
  const std::function<void()>& failure_handler() const { return failure_handler_; }
  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }
  Seconds last_progress() const { return last_progress_; }
  void node_stopped() { last_stop_ = simgrid::s4u::Engine::get_clock(); }
  Seconds last_stop() const { return last_stop_; }
  const std::vector<std::unique_ptr<SimNode>>& nodes() const { return nodes_; }

  void fill(RunReport& report, Seconds run_time) const;  // links, messages, trace

  // [faults]: what the streams and executors apply, and what they injected.
  const FaultPlan& faults() const { return faults_; }
  FaultCounts& fault_counts() { return fault_counts_; }
  // A fault dropped this message (the first one is named in failures it causes).
  void dropped(const MessageHeader& header, const SimNode& from, const SimNode& to, std::string_view why);

 private:
  const Scenario& scenario_;
  Platform& platform_;
  std::unique_ptr<MessageNetwork> network_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
  std::map<std::string, SimNode*, std::less<>> by_address_;
  AddressBook address_book_;
  std::map<std::string, HostStaging> staging_;
  // Links by index into platform_.links and timeline_; what a message between two hosts crosses.
  struct HostLinks {
    std::size_t up = 0;
    std::size_t down = 0;
    int rack = -1;  // two-tier only
  };
  std::size_t link_index(const std::string& name) const;
  std::vector<std::uint64_t> link_bytes_;
  std::map<std::string, std::size_t> link_index_;
  std::map<std::string, int> host_slots_;
  std::vector<HostLinks> host_links_;                       // by host slot
  std::vector<std::unique_ptr<SharedCores>> shared_cores_;  // by host slot; one with "machine" scope
  std::vector<std::size_t> rack_up_, rack_down_;
  std::optional<std::size_t> switch_link_;
  LinkTimeline timeline_;
  std::uint64_t messages_ = 0;
  std::uint64_t message_bytes_ = 0;
  CrossHostTraffic cross_host_;
  std::vector<TraceSpan> trace_;
  std::uint64_t trace_dropped_ = 0;
  std::function<void(const SpanView&)> span_sink_;
  std::string failure_;
  std::function<void()> failure_handler_;
  Seconds last_progress_ = 0;
  Seconds last_stop_ = 0;
  FaultPlan faults_;
  FaultCounts fault_counts_;
};

}  // namespace pstwin::sim
