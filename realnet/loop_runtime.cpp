#include "realnet/loop_runtime.hpp"

#include <malloc.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iostream>
#include <optional>
#include <sstream>
#include <utility>

#include "core/codec.hpp"
#include "ps/workload.hpp"
#include "realnet/loop_pool.hpp"

namespace pstwin::realnet {

namespace {

std::string this_host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "localhost";
  return name.data();
}

// Message buffers of megabytes are allocated on one thread (a worker's loop, ZeroMQ's I/O thread,
// an engine lane) and freed on another. With glibc's defaults each is mmap'ed and unmapped, or lands
// in a per-thread arena whose heap is trimmed or deleted when it empties, so every new buffer
// page-faults its memory in again: measured on loopback, that cost more CPU than moving the bytes.
// One arena, no mmap below 32 MiB and no trimming below 1 GiB keep freed buffers for reuse.
void keep_freed_buffers_for_reuse() {
  static const bool done = [] {
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  static_cast<void>(done);
}

}  // namespace

std::uint64_t max_frame_payload(const Scenario& scenario, const SyntheticWorkload& workload) {
  std::uint64_t largest = 0;
  for (const auto& partition : workload.partitions()) largest = std::max(largest, partition.bytes);
  // Control bodies grow with the job: a node table entry per node (an address and a few numbers), a
  // decision's entry per partition. Generous multiples; 1 MiB at least.
  const auto nodes = static_cast<std::uint64_t>(scenario.roles.workers + scenario.roles.servers +
                                                scenario.roles.validators + 1);
  const std::uint64_t control = (std::uint64_t{1} << 20) + 1024 * nodes + 64 * workload.partitions().size();
  return std::max(largest, control);
}

// ---------------------------------------------------------------- SharedStaging

std::shared_ptr<ByteBuffer> SharedStaging::open(std::string_view name, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  auto it = regions_.find(name);
  if (it == regions_.end() || it->second->size() != bytes)
    it = regions_.insert_or_assign(std::string(name), std::make_shared<ByteBuffer>(bytes)).first;
  return it->second;
}

// ---------------------------------------------------------------- LocalHost

LocalHost::LocalHost(Options options)
    : options_(std::move(options)),
      staging_(options_.staging ? options_.staging : std::make_shared<SharedStaging>()) {
  keep_freed_buffers_for_reuse();
}

Seconds LocalHost::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

void LocalHost::node_stopped() {
  std::lock_guard lock(mutex_);
  ++stopped_;
  last_stop_ = now();
  changed_.notify_all();
}

void LocalHost::fail(const std::string& who, const std::string& text) {
  std::lock_guard lock(mutex_);
  if (failure_.empty()) failure_ = who + ": " + text;
  changed_.notify_all();
}

void LocalHost::fail_configuration(const std::string& who, const std::string& text) {
  std::lock_guard lock(mutex_);
  if (failure_.empty()) {
    failure_ = who + ": " + text;
    configuration_failure_ = true;
  }
  changed_.notify_all();
}

bool LocalHost::configuration_failure() const {
  std::lock_guard lock(mutex_);
  return configuration_failure_;
}

double LocalHost::epoch_s() const {
  return std::chrono::duration<double>(epoch_.time_since_epoch()).count();
}

bool LocalHost::wait_all_stopped(int nodes, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  changed_.wait_until(lock, deadline, [&] { return stopped_ >= nodes || !failure_.empty(); });
  return stopped_ >= nodes;
}

bool LocalHost::failed() const {
  std::lock_guard lock(mutex_);
  return !failure_.empty();
}

std::string LocalHost::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

Seconds LocalHost::last_stop() const {
  std::lock_guard lock(mutex_);
  return last_stop_;
}

void LocalHost::record_span(TraceSpan span) {
  if (!tracing()) return;
  if (span.message && !options_.output.traces(span.message->key, span.message->iteration)) return;
  std::lock_guard lock(mutex_);
  if (trace_.size() >= options_.output.trace_max_events) {
    ++trace_dropped_;
    return;
  }
  trace_.push_back(std::move(span));
}

void LocalHost::count_message(const MessageHeader& header, std::uint64_t wire_bytes) {
  bool crosses = false;
  if (options_.host_of) {
    const std::string from = options_.host_of(header.sender);
    const std::string to = options_.host_of(header.recipient);
    crosses = !from.empty() && !to.empty() && from != to;
  }
  std::lock_guard lock(mutex_);
  ++messages_;
  message_bytes_ += wire_bytes;
  if (crosses) cross_host_.add(header.command, wire_bytes);
}

void LocalHost::log_line(const std::string& line) {
  std::lock_guard lock(mutex_);
  if (options_.log_sink)
    options_.log_sink(line);
  else
    std::cerr << line + "\n";
}

void LocalHost::fill(RunReport& report) const {
  std::lock_guard lock(mutex_);
  report.messages = messages_;
  report.message_bytes = message_bytes_;
  report.cross_host = cross_host_;
  report.trace = trace_;
  report.trace_dropped = trace_dropped_;
}

// ---------------------------------------------------------------- ThreadExecutor

ThreadExecutor::ThreadExecutor(LoopRuntime& node, std::string name, int lanes, Seconds inline_below_s)
    : node_(node), name_(std::move(name)), inline_below_s_(inline_below_s) {
  for (int i = 0; i < std::max(lanes, 1); ++i) {
    auto lane = std::make_unique<Lane>();
    lane->name = lanes == 1 ? name_ : name_ + "." + std::to_string(i);
    Lane* raw = lane.get();
    lane->thread = std::jthread([this, raw](std::stop_token stop) { run_lane(*raw, std::move(stop)); });
    lanes_.push_back(std::move(lane));
  }
}

ThreadExecutor::~ThreadExecutor() {
  // Ask every lane first so they wind down together; each jthread joins as its Lane goes.
  for (auto& lane : lanes_) lane->thread.request_stop();
}

void ThreadExecutor::submit(int lane, std::string_view label, ComputeCost cost, std::function<void()> work,
                            std::function<void()> done) {
  auto& target = *lanes_.at(static_cast<std::size_t>(lane) % lanes_.size());
  // faults.slow: the modelled cost is stretched, and real work (the MLP's math) is followed by a sleep
  // of (factor - 1) x its own time, as the simulator stretches both.
  if (const double factor = node_.slow_factor(); factor > 1) {
    cost.seconds *= factor;
    if (work)
      work = [work = std::move(work), factor] {
        const auto start = std::chrono::steady_clock::now();
        work();
        std::this_thread::sleep_for((std::chrono::steady_clock::now() - start) * (factor - 1));
      };
  }
  const bool nothing_to_do = cost.seconds <= 0 && cost.flops <= 0 && !work;
  // Device work (a GPU copy that waits for its stream) always runs on the lane: it would stall the loop.
  const bool tiny =
      inline_below_s_ > 0 && cost.flops <= 0 && cost.device_seconds <= 0 && cost.seconds < inline_below_s_;
  {
    std::lock_guard lock(target.mutex);
    if (!(nothing_to_do || tiny) || target.busy || !target.tasks.empty()) {
      target.tasks.push_back({std::string(label), cost, std::move(work), std::move(done)});
      target.ready.notify_one();
      return;
    }
  }
  // Every earlier task of this lane has posted its `done`: running this one here and posting its
  // `done` now keeps the order. A tiny task's modelled cost is less than waking the lane would be.
  const Seconds start = node_.now();
  if (work) work();
  node_.trace_lane(target.name, name_, label, start, work ? node_.now() : start);
  node_.post(std::move(done));
}

void ThreadExecutor::run_lane(Lane& lane, std::stop_token stop) {
  // Modelled costs are microseconds: the default 50 us timer slack would stretch every one of them.
  prctl(PR_SET_TIMERSLACK, 1000UL);
  while (true) {
    Task task;
    {
      std::unique_lock lock(lane.mutex);
      if (!lane.ready.wait(lock, stop, [&] { return !lane.tasks.empty(); })) return;
      task = std::move(lane.tasks.front());
      lane.tasks.pop_front();
      lane.busy = true;
    }
    const Seconds start = node_.now();
    // The modelled duration is slept (interruptibly, so shutdown is prompt). cost.flops is not
    // modelled in v0: real compute would run inside `work`.
    if (task.cost.seconds > 0) {
      std::unique_lock lock(lane.mutex);
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::duration<double>(task.cost.seconds));
      lane.ready.wait_until(lock, stop, until, [] { return false; });
      if (stop.stop_requested()) return;
    }
    if (task.work) task.work();
    node_.trace_lane(lane.name, name_, task.label, start, node_.now());
    node_.post(std::move(task.done));
    std::lock_guard lock(lane.mutex);
    lane.busy = false;
  }
}

// ---------------------------------------------------------------- LoopRuntime

LoopRuntime::LoopRuntime(LocalHost& host, Options options)
    : host_(host), options_(std::move(options)), host_name_(this_host_name()) {}

LoopRuntime::~LoopRuntime() = default;

void LoopRuntime::shut_down() {
  halt();
  std::lock_guard lock(executors_mutex_);
  executors_.clear();  // lanes may still run `work` on protocol data: join them first
}

TraceMessage LoopRuntime::trace_message(const Message& message) {
  return {message.header.key, message.header.iteration, kHeaderBytes + message.payload.size()};
}

std::string LoopRuntime::span_name(const MessageHeader& header) {
  return std::string(command_name(header.command)) + (header.is_response ? " response" : "");
}

namespace {
// The node whose loop this thread runs now (a thread of its own, or a LoopPool thread during a turn).
thread_local const LoopRuntime* current_loop = nullptr;
}  // namespace

bool LoopRuntime::on_loop() const {
  return current_loop == this;
}

void LoopRuntime::start() {
  if (options_.pool != nullptr && pool_fd() >= 0) {
    pooled_ = true;
    wake();  // the first turn runs Node::start()
    options_.pool->add(*this);
    return;
  }
  loop_ = std::jthread([this] { run_loop(); });
}

void LoopRuntime::halt() {
  halt_.store(true);
  wake_loop();
  if (pooled_) {
    pool_done_.wait(false);  // the last turn's flush is done and no pool thread holds this node
    return;
  }
  if (loop_.joinable()) loop_.join();
}

void LoopRuntime::wake_loop() {
  if (!wake_pending_.exchange(true)) wake();
}

void LoopRuntime::run_round() {
  // Events posted while events run (an inline task's `done`, which stages the next push) run in the
  // same round, so one received message's whole chain leaves in this round's flush() instead of
  // costing a poll(2) and a ZeroMQ command check per link. Bounded: I/O is never starved.
  constexpr int kEventPassesPerRound = 16;
  auto run_events = [this] {
    std::deque<std::function<void()>> batch;
    for (int pass = 0; pass < kEventPassesPerRound && !halt_.load(); ++pass) {
      {
        std::lock_guard lock(mutex_);
        batch.swap(events_);
      }
      if (batch.empty()) return;
      for (auto& event : batch) {
        if (halt_.load()) break;
        event();
      }
      batch.clear();
    }
  };
  if (!protocol_started_) {
    protocol_started_ = true;
    protocol_->start();
  }
  run_events();
  receive();
  while (!halt_.load()) {
    std::optional<std::function<void()>> fire;
    {
      std::lock_guard lock(mutex_);
      fire = timers_.pop_due(now());
    }
    if (!fire) break;
    (*fire)();
  }
  run_events();
  flush();
}

long LoopRuntime::sleep_ms() {
  std::lock_guard lock(mutex_);
  if (!events_.empty()) return 0;
  if (timers_.empty()) return -1;
  return std::max(0L, static_cast<long>(std::ceil((timers_.next_deadline() - now()) * 1e3)));
}

void LoopRuntime::run_loop() {
  current_loop = this;
  try {
    while (!halt_.load()) {
      run_round();
      if (halt_.load()) break;
      // Sleep in the transport until a message, a post (wake()) or the next timer. Clearing the flag
      // before looking at the queue means a post after the look wakes the loop.
      wake_pending_.store(false);
      wait(sleep_ms());
    }
    flush();  // what the last handler sent (a shutdown ack) still goes out
  } catch (const std::exception& e) {
    fail(std::string("uncaught exception: ") + e.what());
  }
}

bool LoopRuntime::pool_turn() {
  const LoopRuntime* outer = std::exchange(current_loop, this);
  // A few rounds while work keeps coming (a chain of posted events), then the thread looks for other
  // ready nodes: a busy node cannot starve the others of a pool thread.
  constexpr int kRoundsPerTurn = 4;
  long sleep = -1;
  try {
    for (int round = 0; round < kRoundsPerTurn && !halt_.load(); ++round) {
      wait(0);  // what made the descriptor readable: frames, writable sockets
      run_round();
      // Cleared after the round, just before the look at the queue, as run_loop does before it
      // sleeps: a post that came while the flag was still set (by a post whose wake-up this round's
      // wait consumed) did not wake the node, so only this look finds its event, and a post after it
      // wakes the node again. Cleared before the round instead, such an event waited for the node's
      // next timer (up to a heartbeat interval).
      wake_pending_.store(false);
      sleep = sleep_ms();
      if (sleep != 0) break;
    }
    if (halt_.load())
      flush();  // what the last handler sent (a shutdown ack) still goes out
    else if (sleep == 0)
      wake_loop();  // events still queued: readable again, so a pool thread comes back
    else
      arm_pool_timer(sleep);
  } catch (const std::exception& e) {
    fail(std::string("uncaught exception: ") + e.what());
  }
  current_loop = outer;
  return !halt_.load();
}

void LoopRuntime::pool_abandon(const std::string& why) {
  host_.fail(options_.label, why);
  mark_stopped();
}

void LoopRuntime::pool_finished() {
  pool_done_.store(true);
  pool_done_.notify_all();
}

bool LoopRuntime::post(std::function<void()> event) {
  if (!event) return true;
  {
    std::lock_guard lock(mutex_);
    if (halt_.load()) return false;  // the loop is gone; nothing will run it
    events_.push_back(std::move(event));
  }
  if (!on_loop()) wake_loop();  // the loop itself looks at the queue before it sleeps
  return true;
}

void LoopRuntime::inject_faults(const Scenario& scenario, std::optional<double> job_start_s,
                                bool kernel_partitions) {
  if (!scenario.faults.any()) return;
  faults_ = std::make_unique<NodeFaults>(scenario, kernel_partitions);
  if (job_start_s) job_offset_s_ = host_.epoch_s() - *job_start_s;
  // A timed crash names a node; a server learns its rank only from the node table, so every node
  // arms every entry and the one it names, when it fires, crashes.
  for (const auto& [node, at] : faults_->timed_crashes())
    start_timer(std::max(0.0, at - job_time()), [this, node, at] {
      if (self_ == kNoNode)
        crashes_due_.emplace_back(node, at);  // not named yet (a slow start): when the node table comes
      else
        crash_if_named(node, at);
    });
}

void LoopRuntime::set_self(NodeId id) {
  self_ = id;
  for (const auto& [node, at] : std::exchange(crashes_due_, {})) crash_if_named(node, at);
}

void LoopRuntime::crash_if_named(const std::string& node, Seconds at) {
  if (faults_->name_of(self_) != node) return;
  std::ostringstream why;
  why << "crashed by faults.crashes at " << at << " s (as kill -9)";
  crash(why.str());
}

void LoopRuntime::crash(std::string why) {
  if (!on_loop()) {
    post([this, why = std::move(why)]() mutable { crash(std::move(why)); });
    return;
  }
  if (crashed_.exchange(true)) return;
  ++fault_counts_.crashed;
  log(why);
  crash_reason_ = std::move(why);
  mark_stopped();  // halts the loop now: the events, timers and messages after this one never run
}

double LoopRuntime::slow_factor() {
  if (!faults_) return 1;
  const double factor = faults_->slow_factor(job_time(), self_);
  if (factor > 1) ++fault_counts_.slowed;
  return factor;
}

void LoopRuntime::deliver(Message message) {
  // The receiving node draws (its own "faults.loss" and "faults.duplicate" streams): a real sender
  // cannot know what the network did to its message. Addresses, hence numbers, differ between runs.
  if (faults_) {
    const NodeId sender = message.header.sender;
    // Behind a clogged message the connection's later ones wait too, in order.
    if (const auto held = held_.find(sender); held != held_.end()) {
      held->second.push_back(std::move(message));
      return;
    }
    const auto verdict =
        faults_->on_receipt(message.header, job_time(),
                            [this](std::string_view purpose) -> RandomStream& { return random(purpose); });
    auto drop = [&](std::string_view why) {
      if (fault_counts_.first_drop.empty())
        fault_counts_.first_drop = describe_drop(
            message.header, NodeFaults::describe(sender, faults_->name_of(sender)),
            NodeFaults::describe(message.header.recipient, faults_->name_of(message.header.recipient)),
            job_time(), why);
    };
    switch (verdict.fate) {
      case NodeFaults::Fate::kPartitioned:
        drop("faults.partitions");
        ++fault_counts_.partitioned;
        return;
      case NodeFaults::Fate::kLose:
        drop("faults.loss");
        ++fault_counts_.lost;
        return;
      case NodeFaults::Fate::kHold:
        ++fault_counts_.clogged;
        fault_counts_.clog_hold_s += verdict.release - job_time();
        held_[sender].push_back(std::move(message));
        start_timer(verdict.release - job_time(), [this, sender] { release_held(sender); });
        return;
      case NodeFaults::Fate::kDuplicate:
        ++fault_counts_.duplicated;
        protocol_->on_message(message);
        break;
      case NodeFaults::Fate::kDeliver:
        break;
    }
  }
  protocol_->on_message(std::move(message));
}

void LoopRuntime::release_held(NodeId sender) {
  const auto it = held_.find(sender);
  if (it == held_.end()) return;
  std::deque<Message> held = std::move(it->second);
  held_.erase(it);
  // Each goes through the faults again at its release: a later clog may hold it anew, and then the
  // rest queue behind it once more.
  while (!held.empty() && !halt_.load()) {
    deliver(std::move(held.front()));
    held.pop_front();
  }
}

Refusals LoopRuntime::refusals() const {
  std::lock_guard lock(refusals_mutex_);
  return refusals_;
}

double LoopRuntime::own_pacing_rate(std::string_view van) {
  if (!options_.kernel_pacing) return options_.nic_rate_Bps;
  if (options_.nic_rate_Bps > 0)
    log("PSTWIN_PACING=kernel: the " + std::string(van) +
        " van cannot set SO_MAX_PACING_RATE on its sockets; its connections are not paced (unset "
        "PSTWIN_PACING for the van's own pacing)");
  return 0;
}

void LoopRuntime::refuse(const std::string& peer, const std::string& why) {
  // Bounded: past this many peers, further ones share one entry.
  constexpr std::size_t kMaxPeers = 256;
  constexpr std::uint64_t kLoggedPerPeer = 10;
  std::uint64_t count = 0;
  {
    std::lock_guard lock(refusals_mutex_);
    auto it = refusals_.find(peer);
    if (it == refusals_.end() && refusals_.size() >= kMaxPeers)
      it = refusals_.try_emplace("other peers").first;
    if (it == refusals_.end()) it = refusals_.emplace(peer, 0).first;
    count = ++it->second;
  }
  bool power_of_ten = count >= kLoggedPerPeer;
  for (std::uint64_t n = count; power_of_ten && n > 1; n /= 10) power_of_ten = n % 10 == 0;
  if (count <= kLoggedPerPeer || power_of_ten)
    log("refused (" + peer + ", " + std::to_string(count) + " so far): " + why);
}

void LoopRuntime::connect(NodeId id, std::string_view address) {
  if (!on_loop()) {
    post([this, id, to = std::string(address)] { connect(id, to); });
    return;
  }
  peers_[id] = std::string(address);
  bind_peer(id, std::string(address));
}

void LoopRuntime::send(Message message) {
  if (!on_loop()) {  // sequence numbers and sockets belong to the loop
    post([this, message = std::move(message)]() mutable { send(std::move(message)); });
    return;
  }
  message.header.sequence = next_sequence_++;
  send_numbered(std::move(message));
}

std::uint64_t LoopRuntime::next_sequence() {
  return next_sequence_++;  // on the loop, as the resend layer is
}

void LoopRuntime::send_numbered(Message message) {
  if (!on_loop()) {
    post([this, message = std::move(message)]() mutable { send_numbered(std::move(message)); });
    return;
  }
  const NodeId to = message.header.recipient;
  if (!peers_.contains(to)) {
    fail(options_.label + " has no connection to node " + std::to_string(to) + " (no address known for it)");
    return;
  }
  message.header.sender = self_;
  queue(std::move(message));
}

TimerId LoopRuntime::start_timer(Seconds delay, std::function<void()> fire) {
  TimerId id = 0;
  {
    std::lock_guard lock(mutex_);
    id = timers_.add(now() + delay, std::move(fire));
  }
  if (!on_loop()) wake_loop();
  return id;
}

void LoopRuntime::cancel_timer(TimerId id) {
  std::lock_guard lock(mutex_);
  timers_.cancel(id);
}

RandomStream& LoopRuntime::random(std::string_view purpose) {
  auto it = randoms_.find(purpose);
  if (it == randoms_.end())
    it =
        randoms_.emplace(std::string(purpose), RandomStream(options_.seed, purpose, fnv1a64(address_))).first;
  return it->second;
}

Executor& LoopRuntime::executor(std::string_view name, int lanes) {
  std::lock_guard lock(executors_mutex_);
  auto it = executors_.find(name);
  if (it == executors_.end())
    it = executors_
             .emplace(std::string(name), std::make_unique<ThreadExecutor>(*this, std::string(name), lanes,
                                                                          options_.inline_task_below_s))
             .first;
  return *it->second;
}

void LoopRuntime::trace_span(std::string_view category, std::string_view name, Seconds start, Seconds end) {
  trace_lane("main", category, name, start, end);
}

void LoopRuntime::trace_lane(std::string_view lane, std::string_view category, std::string_view name,
                             Seconds start, Seconds end, std::optional<TraceMessage> message) {
  if (!host_.tracing()) return;
  host_.record_span({options_.label, options_.pid, std::string(lane), std::string(category),
                     std::string(name), start, end, message});
}

void LoopRuntime::log(std::string_view text) {
  std::ostringstream line;
  line << "[" << now() << " s] " << options_.label << ": " << text;
  host_.log_line(line.str());
}

void LoopRuntime::mark_stopped() {
  halt_.store(true);
  if (!on_loop()) wake_loop();
  if (!stopped_flag_.exchange(true)) host_.node_stopped();
}

void LoopRuntime::stop() {
  mark_stopped();
}

void LoopRuntime::fail(std::string text) {
  fail_on_loop(std::move(text), false);
}

void LoopRuntime::fail_configuration(std::string text) {
  fail_on_loop(std::move(text), true);
}

void LoopRuntime::fail_on_loop(std::string text, bool configuration) {
  if (!on_loop() && protocol_) {
    // The protocol's state is the loop's: its last word is said there, sent by the loop's last flush.
    // A loop that is already ending takes no event: the failure is recorded from here.
    auto last_word = [this, text, configuration]() mutable { fail_on_loop(std::move(text), configuration); };
    if (post(std::move(last_word))) return;
  }
  if (on_loop() && protocol_ && !failing_ && !halt_.load()) {
    failing_ = true;  // a failure while saying the last word must not say it again
    protocol_->on_failing(text);
  }
  if (configuration)
    host_.fail_configuration(options_.label, text);
  else
    host_.fail(options_.label, text);
  mark_stopped();
}

std::string LoopRuntime::describe() const {
  return options_.label + ": " +
         (stopped_flag_.load() ? std::string("stopped")
          : protocol_          ? protocol_->describe_state()
                               : "not started");
}

}  // namespace pstwin::realnet
