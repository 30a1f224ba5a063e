// The real-network backend: one ZmqNodeRuntime per protocol node, talking ZeroMQ over TCP.
// Threads per node: an event loop that owns protocol state and every ZeroMQ socket of the node
// (start, receives, timers, executor `done`s, sends; it sleeps in zmq_poll on its ROUTER and an
// eventfd), ZeroMQ's own I/O thread, and one thread per executor lane. Nodes of one process share a
// LocalHost: staging, run outcome, trace.
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
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/runtime.hpp"
#include "core/timer_queue.hpp"
#include "report/run_report.hpp"

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
    bool trace = false;
    std::uint64_t trace_max_events = 0;
    // Receives every log line (already prefixed); null: stderr.
    std::function<void(std::string_view)> log_sink;
    // Staging for every node of this process; null: an in-process SharedStaging.
    std::shared_ptr<StagingArea> staging;
  };
  explicit LocalHost(Options options);

  Seconds now() const;
  // now()'s zero on the steady clock, which every process of this host shares: aligns the traces of
  // a job's node processes.
  double epoch_s() const;
  StagingArea& staging() { return *staging_; }

  void node_stopped();
  void fail(const std::string& who, const std::string& text);
  // Waits until `nodes` nodes stopped, a node failed, or `deadline` passed; true if all stopped.
  bool wait_all_stopped(int nodes, std::chrono::steady_clock::time_point deadline);
  bool failed() const;
  std::string failure() const;
  Seconds last_stop() const;

  bool tracing() const { return options_.trace; }
  void record_span(TraceSpan span);
  void count_message(std::uint64_t wire_bytes);
  void log_line(const std::string& line);
  void fill(RunReport& report) const;  // messages, trace

 private:
  const std::chrono::steady_clock::time_point epoch_ = std::chrono::steady_clock::now();
  Options options_;
  std::shared_ptr<StagingArea> staging_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int stopped_ = 0;
  Seconds last_stop_ = 0;
  std::string failure_;
  std::vector<TraceSpan> trace_;
  std::uint64_t trace_dropped_ = 0;
  std::uint64_t messages_ = 0;
  std::uint64_t message_bytes_ = 0;
};

class ZmqNodeRuntime;

// The ROUTER could not bind: what() is "cannot bind HOST:PORT: <reason>".
class BindError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One OS thread and one task FIFO per lane. A task sleeps its modelled cost, runs `work` on the
// lane, then posts `done` to the node's event loop. A task with no cost and no work submitted to an
// idle lane posts `done` at once: the same order, without waking the lane's thread.
class ThreadExecutor final : public Executor {
 public:
  ThreadExecutor(ZmqNodeRuntime& node, std::string name, int lanes);
  ~ThreadExecutor() override;
  int lanes() const override { return static_cast<int>(lanes_.size()); }
  void submit(int lane, std::string_view label, ComputeCost cost, std::function<void()> work,
              std::function<void()> done) override;

 private:
  struct Task {
    std::string label;
    ComputeCost cost;
    std::function<void()> work;
    std::function<void()> done;
  };
  struct Lane {
    std::string name;
    std::mutex mutex;
    std::condition_variable_any ready;
    std::deque<Task> tasks;
    bool busy = false;    // a task was taken and its `done` not yet posted
    std::jthread thread;  // last: joined before the queue it reads is destroyed
  };
  void run_lane(Lane& lane, std::stop_token stop);

  ZmqNodeRuntime& node_;
  std::string name_;
  std::vector<std::unique_ptr<Lane>> lanes_;
};

class ZmqNodeRuntime final : public Runtime {
 public:
  struct Options {
    std::string label;  // "worker 0": logs and trace
    int pid = 0;        // trace process id
    std::uint64_t seed = 0;
    // "HOST:PORT" to bind the ROUTER on; PORT "*" picks a free one. The bound address is advertised.
    std::string bind = "127.0.0.1:*";
    // > 0: on shutdown, send what is queued and wait up to this long for it to leave (a node
    // process's last reply must reach the scheduler before the process exits). 0: drop it.
    int linger_ms = 0;
  };
  // Binds the node's ROUTER socket before returning; throws BindError if it cannot.
  ZmqNodeRuntime(LocalHost& host, Options options);
  ~ZmqNodeRuntime() override;
  ZmqNodeRuntime(const ZmqNodeRuntime&) = delete;
  ZmqNodeRuntime& operator=(const ZmqNodeRuntime&) = delete;

  void attach(std::unique_ptr<Node> protocol) { protocol_ = std::move(protocol); }
  void start();  // starts the event loop, which runs Node::start() first
  // Ends the event loop and joins it (idempotent); afterwards protocol state may be read here.
  void halt();
  bool stopped() const { return stopped_flag_.load(); }
  std::string describe() const;  // call only after halt()
  const std::string& label() const { return options_.label; }
  std::uint64_t rejected_frames() const { return rejected_.load(); }
  // Payload bytes received into a copy rather than adopted in place (small, misaligned frames).
  std::uint64_t received_bytes_copied() const { return received_bytes_copied_.load(); }
  void post(std::function<void()> event);  // run on the event loop; any thread
  void trace_lane(std::string_view lane, std::string_view category, std::string_view name, Seconds start,
                  Seconds end);

  // Runtime
  NodeId self() const override { return self_; }
  void set_self(NodeId id) override { self_ = id; }
  std::string local_address() const override { return address_; }
  std::string host_name() const override { return host_name_; }
  void connect(NodeId id, std::string_view address) override;
  void send(Message message) override;
  Seconds now() const override { return host_.now(); }
  TimerId start_timer(Seconds delay, std::function<void()> fire) override;
  void cancel_timer(TimerId id) override;
  RandomStream& random(std::string_view purpose) override;
  void compute(std::string_view label, ComputeCost cost, std::function<void()> done) override;
  Executor& executor(std::string_view name, int lanes) override;
  StagingArea& staging() override { return host_.staging(); }
  void trace_span(std::string_view category, std::string_view name, Seconds start, Seconds end) override;
  void log(std::string_view text) override;
  void stop() override;
  void fail(std::string text) override;

 private:
  class Sockets;  // the event loop's ZeroMQ sockets (zmq types stay out of this header)
  void run_loop();
  void mark_stopped();
  bool on_loop() const { return std::this_thread::get_id() == loop_id_.load(); }
  void wake_loop();  // from another thread: the loop leaves zmq_poll

  LocalHost& host_;
  Options options_;
  std::string host_name_;
  std::string address_;
  NodeId self_ = kNoNode;
  std::unique_ptr<Node> protocol_;

  // Event loop state, guarded by mutex_: posted events run FIFO, then received messages, then due
  // timers in (deadline, id) order, then queued sends go out.
  std::mutex mutex_;
  std::atomic<bool> halt_ = false;
  std::atomic<bool> wake_pending_ = false;  // an eventfd signal is on its way: others need not send one
  std::deque<std::function<void()>> events_;
  TimerQueue timers_;
  std::atomic<std::thread::id> loop_id_{};
  std::atomic<bool> stopped_flag_ = false;

  // Touched only on the event loop thread (the protocol's calls).
  std::uint64_t next_sequence_ = 1;
  std::map<NodeId, std::string> peers_;
  std::map<std::string, RandomStream, std::less<>> randoms_;

  std::mutex executors_mutex_;
  std::map<std::string, std::unique_ptr<ThreadExecutor>, std::less<>> executors_;

  std::atomic<std::uint64_t> rejected_ = 0;
  std::atomic<std::uint64_t> received_bytes_copied_ = 0;
  std::unique_ptr<Sockets> sockets_;
  std::jthread loop_;
};

}  // namespace pstwin::realnet

namespace pstwin::realnet {

// Sends one multipart message of raw frames to the ROUTER at `address` ("127.0.0.1:PORT") from a
// fresh DEALER, waiting up to `linger_ms` for it to leave. For tests and fuzzing tools.
void send_raw(std::string_view address, const std::vector<std::string>& frames, int linger_ms = 2000);

}  // namespace pstwin::realnet
