// What every real-network node runtime shares, whatever moves its bytes (ZeroMQ or FPT's epoll
// transport): the event loop that owns protocol state (posted events, received messages, timers,
// queued sends, then a sleep in the transport until I/O, a post or the next timer), executor lanes
// on threads, per-purpose random streams, tracing and logging, stop and failure. A transport
// subclass supplies the five hooks at the bottom. Nodes of one process share a LocalHost: staging,
// run outcome, trace.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/runtime.hpp"
#include "core/timer_queue.hpp"
#include "ps/faults.hpp"
#include "realnet/node_faults.hpp"
#include "report/run_report.hpp"

namespace pstwin {
class SyntheticWorkload;
}

namespace pstwin::realnet {

// Host-local staging shared by every node of this process (they are "on one host"): the same name
// is the same buffer, a new one if the size differs (as sim's HostStaging). Cross-process staging
// is ShmStaging (realnet/shm_staging.hpp), which `pstwin node` passes in LocalHost::Options.
class SharedStaging final : public StagingArea {
 public:
  std::shared_ptr<ByteBuffer> open(std::string_view name, std::size_t bytes) override;

 private:
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<ByteBuffer>, std::less<>> regions_;
};

// What the nodes of one process share: the clock epoch, staging, the run's outcome (stops and the
// first failure), trace spans, message counts and a log sink. Every member is thread-safe.
class LocalHost {
 public:
  struct Options {
    OutputConfig output{.trace = false, .trace_max_events = 0, .trace_iterations = {}, .trace_keys = {}};
    // Receives every log line (already prefixed); null: stderr.
    std::function<void(std::string_view)> log_sink;
    // Staging for every node of this process; null: an in-process SharedStaging.
    std::shared_ptr<StagingArea> staging;
    // The scenario host of a node id ("" for none), which counts a message as crossing hosts when its
    // sender's and recipient's differ; null: none does.
    std::function<std::string(NodeId)> host_of;
  };
  explicit LocalHost(Options options);

  Seconds now() const;
  // now()'s zero on the steady clock, which every process of this host shares: aligns the traces of
  // a job's node processes.
  double epoch_s() const;
  StagingArea& staging() { return *staging_; }

  void node_stopped();
  void fail(const std::string& who, const std::string& text);
  // fail() for a node whose configuration does not fit the job: `pstwin node` exits 2.
  void fail_configuration(const std::string& who, const std::string& text);
  bool configuration_failure() const;
  // Waits until `nodes` nodes stopped, a node failed, or `deadline` passed; true if all stopped.
  bool wait_all_stopped(int nodes, std::chrono::steady_clock::time_point deadline);
  bool failed() const;
  std::string failure() const;
  Seconds last_stop() const;

  bool tracing() const { return options_.output.trace; }
  void record_span(TraceSpan span);
  void count_message(const MessageHeader& header, std::uint64_t wire_bytes);
  void log_line(const std::string& line);
  void fill(RunReport& report) const;  // messages, cross-host traffic, trace

 private:
  const std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  Options options_;
  std::shared_ptr<StagingArea> staging_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int stopped_ = 0;
  Seconds last_stop_ = 0;
  std::string failure_;
  bool configuration_failure_ = false;  // the first failure was fail_configuration's
  std::vector<TraceSpan> trace_;
  std::uint64_t trace_dropped_ = 0;
  std::uint64_t messages_ = 0;
  std::uint64_t message_bytes_ = 0;
  CrossHostTraffic cross_host_;
};

// The node could not listen: what() is "cannot bind HOST:PORT: <reason>".
class BindError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class LoopPool;

// How a node runtime is set up, whatever its transport.
struct NodeRuntimeOptions {
  std::string label;  // "worker 0": logs and trace
  int pid = 0;        // trace process id
  std::uint64_t seed = 0;
  // "HOST:PORT" to listen on; PORT "*" picks a free one. The bound address is advertised.
  std::string bind = "127.0.0.1:*";
  // > 0: on shutdown, send what is queued and wait up to this long for it to leave (a node
  // process's last reply must reach the scheduler before the process exits). 0: drop it.
  int linger_ms = 0;
  // > 0: an executor task with no FLOPs and a modelled cost below this, submitted to an idle lane,
  // runs at once on the submitting thread (the event loop) instead of waking the lane's thread. A
  // server's 4 KB summation is modelled at about 1 us; handing it to a lane costs two thread
  // wake-ups, each longer than that on a 2-core VM (4 KB blocking p50 over ZeroMQ: 287 -> 188 us).
  Seconds inline_task_below_s = 10e-6;
  // > 0: this node's NIC rate in bytes/s (PSTWIN_NIC_RATE; `pstwin run --netns` sets each host's
  // shaped rate). The epoll van's send pool then paces connections lighter than the heaviest to their
  // share of it (docs/FPT.md "Send pool"); 0: no pacing.
  double nic_rate_Bps = 0;
  // PSTWIN_PACING=kernel: the epoll van leaves pacing to the kernel (SO_MAX_PACING_RATE) instead of
  // holding a paced connection a message at a time itself (EpollTransport::Options::Pacing).
  bool kernel_pacing = false;
  // PSTWIN_JOB_TOKEN: every connection to this node proves with it that its process belongs to the
  // job before anything it sends is read (realnet/job_auth.hpp); "": no proof asked or given.
  std::string job_token;
  // PSTWIN_ENCRYPT=curve: every connection of the ZeroMQ van is encrypted with ZeroMQ CURVE under the
  // key pair job_token gives (JobKey::curve_keys); make_node_runtime refuses it without a token or on
  // another van.
  bool encrypt = false;
  // The largest payload a frame may announce (the scenario's largest message, max_frame_payload()):
  // a header announcing more is refused before anything is allocated for it. 0: DecodeLimits' default.
  std::uint64_t max_payload_bytes = 0;
  // Not null: the node's event loop runs on this pool's threads with the other nodes of the process
  // (realnet/loop_pool.hpp), if its van can (the epoll van); null or another van: a thread of its own.
  LoopPool* pool = nullptr;
};

// The largest payload a frame of this job carries: its largest partition (a push, a pull's answer, a
// ZenoPS candidate), or what its control messages (node table, load-balancing decision, texts) can
// need, whichever is larger. NodeRuntimeOptions::max_payload_bytes.
std::uint64_t max_frame_payload(const Scenario& scenario, const SyntheticWorkload& workload);

// What a node refused, per peer: "node 9" for a member's connection, "127.0.0.1" for connections
// that never proved membership (one entry per host, so many connections cannot grow the table).
using Refusals = std::map<std::string, std::uint64_t>;

class LoopRuntime;

// One OS thread and one task FIFO per lane. A task sleeps its modelled cost, runs `work` on the
// lane, then posts `done` to the node's event loop. A task with no cost and no work (or a tiny one,
// see NodeRuntimeOptions::inline_task_below_s) submitted to an idle lane runs and posts `done` at
// once: the same order, without waking the lane's thread.
class ThreadExecutor final : public Executor {
 public:
  ThreadExecutor(LoopRuntime& node, std::string name, int lanes, Seconds inline_below_s = 0);
  ~ThreadExecutor() override;
  int lanes() const override { return static_cast<int>(lanes_.size()); }
  void submit(int lane, std::string_view label, ComputeCost cost, std::function<void()> work,
              std::function<void()> done) override;

 private:
  struct Lane {
    std::string name;
    std::mutex mutex;
    std::condition_variable_any ready;
    std::deque<Task> tasks;
    bool busy = false;    // a task was taken and its `done` not yet posted
    std::jthread thread;  // last: joined before the queue it reads is destroyed
  };
  void run_lane(Lane& lane, std::stop_token stop);

  LoopRuntime& node_;
  std::string name_;
  Seconds inline_below_s_;
  std::vector<std::unique_ptr<Lane>> lanes_;
};

class LoopRuntime : public Runtime {
 public:
  using Options = NodeRuntimeOptions;
  ~LoopRuntime() override;
  LoopRuntime(const LoopRuntime&) = delete;
  LoopRuntime& operator=(const LoopRuntime&) = delete;

  void attach(std::unique_ptr<Node> protocol) { protocol_ = std::move(protocol); }
  const Node* protocol() const { return protocol_.get(); }  // after halt()
  // [faults] as this node applies them (before start(); realnet/node_faults.hpp): loss, duplication,
  // partitions and clogs to what it receives, faults.slow to its executor tasks, timed crashes to
  // itself. `job_start_s`: the job's start on the steady clock (PSTWIN_JOB_START), the zero of every
  // fault window; unset: this process's start.
  // `kernel_partitions`: see NodeFaults.
  void inject_faults(const Scenario& scenario, std::optional<double> job_start_s = std::nullopt,
                     bool kernel_partitions = false);
  const FaultCounts& fault_counts() const { return fault_counts_; }  // after halt()
  // Stops this node dead, as kill -9 would (faults.crashes): nothing more is handled, sent or timed;
  // what it had already sent still leaves. Any thread.
  void crash(std::string why);
  bool crashed() const { return crashed_.load(); }
  const std::string& crash_reason() const { return crash_reason_; }  // after halt()
  // How many times longer an executor task starting now takes (faults.slow; 1: not slowed). Loop only.
  double slow_factor();
  // Everything this node refused (malformed, forged, unauthenticated, over the limits), by peer.
  Refusals refusals() const;
  // Refuses one message or connection from `peer` (see Refusals): counted, and logged while the
  // peer's count is small (then at each power of ten, so a flood cannot flood the log). Any thread.
  void refuse(const std::string& peer, const std::string& why);
  void start();  // starts the event loop, which runs Node::start() first
  // Ends the event loop and joins it (idempotent); afterwards protocol state may be read here.
  void halt();
  bool stopped() const { return stopped_flag_.load(); }
  std::string describe() const;  // call only after halt()
  const std::string& label() const { return options_.label; }
  // Runs `event` on the event loop; any thread. False (and dropped) once the loop is ending.
  bool post(std::function<void()> event);
  void trace_lane(std::string_view lane, std::string_view category, std::string_view name, Seconds start,
                  Seconds end, std::optional<TraceMessage> message = std::nullopt);

  // Runtime
  NodeId self() const override { return self_; }
  void set_self(NodeId id) override;
  std::string local_address() const override { return address_; }
  std::string host_name() const override { return host_name_; }
  void connect(NodeId id, std::string_view address) override;
  void send(Message message) override;
  std::uint64_t next_sequence() override;
  void send_numbered(Message message) override;
  Seconds now() const override { return host_.now(); }
  TimerId start_timer(Seconds delay, std::function<void()> fire) override;
  void cancel_timer(TimerId id) override;
  RandomStream& random(std::string_view purpose) override;
  Executor& executor(std::string_view name, int lanes) override;
  StagingArea& staging() override { return host_.staging(); }
  void trace_span(std::string_view category, std::string_view name, Seconds start, Seconds end) override;
  void trace_tagged(std::string_view lane, std::string_view category, std::string_view name, Seconds start,
                    Seconds end, const SpanTags& tags) override {
    trace_lane(lane, category, name, start, end, pstwin::trace_message(tags));
  }
  void log(std::string_view text) override;
  void stop() override;
  // Gives the protocol its last word first (Node::on_failing: a node tells the scheduler, the
  // scheduler every node), on the event loop; from another thread the failure is posted there.
  void fail(std::string text) override;
  void fail_configuration(std::string text) override;

 protected:
  LoopRuntime(LocalHost& host, Options options);
  // A subclass's destructor calls this first: it ends the loop and joins every executor lane, so
  // nothing calls a hook while the subclass's transport goes.
  void shut_down();
  // The bound address, set by the subclass's constructor.
  void set_address(std::string address) { address_ = std::move(address); }
  bool halting() const { return halt_.load(); }
  // Hands a received message to the protocol (event loop only), through the injected faults.
  void deliver(Message message);
  static std::string span_name(const MessageHeader& header);
  // The NIC rate (PSTWIN_NIC_RATE) a van that paces its own messages (fpt::MessagePacer) paces to: 0
  // with PSTWIN_PACING=kernel, which such a van cannot hand to its sockets (the log says so).
  double own_pacing_rate(std::string_view van);
  static TraceMessage trace_message(const Message& message);  // a send or receive span's args

  // A van whose loop can run on a LoopPool: a descriptor that is readable while the loop has work (I/O,
  // a wake(), a timer armed here); -1: it cannot. arm_pool_timer makes it readable within
  // `timeout_ms` (-1: never by time), or earlier for the van's own deadlines. Event loop only.
  virtual int pool_fd() const { return -1; }
  virtual void arm_pool_timer(long /*timeout_ms*/) {}

  // Transport hooks, all on the event loop thread except wake().
  virtual void bind_peer(NodeId id, const std::string& address) = 0;
  virtual void queue(Message message) = 0;  // sender and sequence filled; leaves in flush()
  virtual void receive() = 0;               // delivers what arrived since the last wait
  virtual void flush() = 0;                 // sends what was queued
  virtual void wait(long timeout_ms) = 0;   // until I/O, wake() or the timeout (-1: none)
  virtual void wake() = 0;                  // any thread: the loop leaves wait() soon

  LocalHost& host_;
  const Options options_;

 private:
  friend class LoopPool;
  void run_loop();
  // One pass: posted events, received messages, due timers, the events those posted, then sends.
  void run_round();
  // How long the loop may sleep now: 0 with events queued, until the next timer, or -1.
  long sleep_ms();
  // LoopPool's side: a turn of this node on a pool thread (false: the loop ended, do not re-arm);
  // the pool gave up on it; the pool will not run it again.
  bool pool_turn();
  void pool_abandon(const std::string& why);
  void pool_finished();
  void mark_stopped();
  void release_held(NodeId sender);
  void crash_if_named(
      const std::string& node,
      Seconds at);  // a timed crash, if it names this node  // a clog ended: what it held goes on, in order
  Seconds job_time() const { return now() + job_offset_s_; }
  // The protocol's last word on the loop, once; then the failure is recorded and the loop ends.
  void fail_on_loop(std::string text, bool configuration);
  bool on_loop() const;
  void wake_loop();

  std::string host_name_;
  std::string address_;
  NodeId self_ = kNoNode;
  std::unique_ptr<Node> protocol_;
  std::unique_ptr<NodeFaults> faults_;          // a fault configured
  Seconds job_offset_s_ = 0;                    // job time = now() + this
  FaultCounts fault_counts_;                    // event loop only
  std::map<NodeId, std::deque<Message>> held_;  // by sender: clogged, and what came behind it
  std::atomic<bool> crashed_ = false;
  std::string crash_reason_;  // event loop only
  // Timed crashes that fired before the node table named this node: taken when it does.
  std::vector<std::pair<std::string, Seconds>> crashes_due_;

  // Event loop state, guarded by mutex_: posted events run FIFO, then received messages, then due
  // timers in (deadline, id) order, then the events those posted, then queued sends go out.
  std::mutex mutex_;
  std::atomic<bool> halt_ = false;
  std::atomic<bool> wake_pending_ = false;  // a wake-up is on its way: others need not send one
  std::deque<std::function<void()>> events_;
  TimerQueue timers_;
  bool pooled_ = false;                  // start() gave the loop to options_.pool
  bool protocol_started_ = false;        // the loop ran Node::start()
  std::atomic<bool> pool_done_ = false;  // pooled: the pool will not run this node again
  std::atomic<bool> stopped_flag_ = false;

  // Touched only on the event loop thread (the protocol's calls).
  std::uint64_t next_sequence_ = 1;
  bool failing_ = false;  // on_failing was called
  std::map<NodeId, std::string> peers_;
  std::map<std::string, RandomStream, std::less<>> randoms_;

  mutable std::mutex refusals_mutex_;
  Refusals refusals_;

  std::mutex executors_mutex_;
  std::map<std::string, std::unique_ptr<ThreadExecutor>, std::less<>> executors_;
  std::jthread loop_;
};

}  // namespace pstwin::realnet
