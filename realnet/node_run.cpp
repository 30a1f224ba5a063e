#include "realnet/node_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "core/codec.hpp"
#include "core/digest.hpp"
#include "cuda/cuda_tensors.hpp"
#include "ps/balance.hpp"
#include "ps/host_groups.hpp"
#include "ps/ids.hpp"
#include "ps/invariants.hpp"
#include "ps/resend.hpp"
#include "ps/round_plan.hpp"
#include "realnet/locked_observer.hpp"
#include "realnet/loop_runtime.hpp"
#include "realnet/nic_rate.hpp"
#include "realnet/shm_staging.hpp"
#include "realnet/stop_signals.hpp"
#include "report/accuracy_recorder.hpp"
#include "report/run_recorder.hpp"
#include "report/selection_recorder.hpp"
#include "report/staleness_recorder.hpp"
#include "report/validation_recorder.hpp"
#include "zeno/roles.hpp"

namespace pstwin::realnet {
namespace {

// How late a node notices SIGINT or SIGTERM while it waits for its protocol to end.
constexpr auto kSignalPoll = std::chrono::milliseconds(50);
// How long a stopping node's event loop may take to tell its peers before the node stops anyway.
constexpr auto kLastWordGrace = std::chrono::seconds(1);

// What one node sees of the run: counts for the summary, this server's applied pushes (for a
// per-server lost-update check), and PS_VERBOSE progress lines. Called under LockedObserver's lock.
class NodeStats final : public RunObserver {
 public:
  NodeStats(const Scenario& sc, int verbose, std::function<void(const std::string&)> log)
      : last_iteration_(sc.workload.iterations - 1),
        sync_(sc.ps.mode == TrainingMode::kSync),
        verbose_(verbose),
        log_(std::move(log)) {}

  void node_table(const std::vector<NodeInfo>& table, Seconds at) override {
    nodes = table;
    if (verbose_ >= 1)
      log_("node table complete (" + std::to_string(table.size()) + " nodes) at " + time(at));
  }
  void barrier_released(int group, Seconds at) override {
    if (verbose_ >= 1) log_("barrier released for group " + std::to_string(group) + " at " + time(at));
  }
  // ps.max_staleness: a refused push is accounted for, like an applied one.
  void push_staleness(NodeId /*server*/, int worker, std::uint64_t key, std::uint32_t iteration,
                      std::uint64_t /*staleness*/, bool admitted) override {
    if (!admitted) applied.insert({key, iteration, worker});
  }
  void push_applied(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) override {
    applied.insert({key, iteration, worker});
    if (verbose_ >= 2)
      log_("server " + std::to_string(server) + " applied worker " + std::to_string(worker) +
           "'s push of key " + std::to_string(key) + ", iteration " + std::to_string(iteration));
  }
  void aggregate_complete(NodeId, std::uint64_t key, std::uint32_t iteration, const Payload&) override {
    ++aggregates;
    if (verbose_ >= 2)
      log_("aggregate of key " + std::to_string(key) + ", iteration " + std::to_string(iteration));
  }
  void final_store(NodeId, std::uint64_t key, const Payload& store) override {
    digests[key] = value_digest(key, store);
  }
  void pull_received(int worker, std::uint64_t key, std::uint32_t iteration, const Payload& value) override {
    // As RunRecorder: in sync mode worker 0's last pulls stand for the model.
    if (sync_ && worker == 0 && static_cast<int>(iteration) == last_iteration_)
      digests[key] = value_digest(key, value);
    if (verbose_ >= 2) log_("pulled key " + std::to_string(key) + ", iteration " + std::to_string(iteration));
  }
  // ps.balancing = "lb": a server or worker reports only the decisions it took up itself.
  void lb_decision(NodeId, const LbDecision& decision) override { decisions[decision.iteration] = decision; }
  void worker_lost(int worker, Seconds /*at*/) override { lost.insert(worker); }
  // ps.backup_workers: a late push is accounted for (not lost), like an applied one.
  void late_push(NodeId, int worker, std::uint64_t key, std::uint32_t iteration) override {
    applied.insert({key, iteration, worker});
  }
  void iteration_done(int worker, std::uint32_t iteration, Seconds start, Seconds end) override {
    ++iterations;
    times.push_back({iteration, start, end});
    if (verbose_ >= 1)
      log_("worker " + std::to_string(worker) + " finished iteration " + std::to_string(iteration) + " in " +
           time(end - start));
  }

  std::set<std::tuple<std::uint64_t, std::uint32_t, int>> applied;
  std::set<int> lost;  // ps.on_worker_loss = "continue": workers declared lost
  std::uint64_t aggregates = 0;
  std::uint64_t iterations = 0;
  std::vector<NodePart::Iteration> times;
  std::map<std::uint64_t, std::string> digests;
  std::vector<NodeInfo> nodes;
  std::map<std::uint32_t, LbDecision> decisions;

 private:
  // Exactly RunRecorder's per-key digest, so `pstwin run` can combine them as RunRecorder::fill does.
  static std::string value_digest(std::uint64_t key, const Payload& value) {
    Digest digest;
    digest.update_u64(key);
    digest.update_u64(value.size());
    if (!value.is_phantom()) digest.update(value.bytes());
    return digest.hex();
  }
  int last_iteration_;
  bool sync_;
  static std::string time(Seconds s) {
    std::ostringstream out;
    out << s << " s";
    return out.str();
  }
  int verbose_;
  std::function<void(const std::string&)> log_;
};

// Counts the wire bytes a node receives (what the simulator would carry on its host's `.down`).
class ReceiveCounter final : public Node {
 public:
  explicit ReceiveCounter(std::unique_ptr<Node> inner) : inner_(std::move(inner)) {}
  void start() override { inner_->start(); }
  void on_message(Message message) override {
    bytes_ += kHeaderBytes + message.payload.size();
    inner_->on_message(std::move(message));
  }
  std::string describe_state() const override { return inner_->describe_state(); }
  void on_failing(std::string_view why) override { inner_->on_failing(why); }
  std::uint64_t bytes() const { return bytes_; }  // read after the event loop has stopped
  const Node* inner() const { return inner_.get(); }

 private:
  std::unique_ptr<Node> inner_;
  std::uint64_t bytes_ = 0;
};

std::string label_of(const NodeEnv& env) {
  switch (env.role) {
    case Role::kScheduler:
      return "scheduler";
    case Role::kServer:
      return "server";  // its rank comes from the scheduler
    case Role::kValidator:
      return "validator " + std::to_string(env.validator_id);
    default:
      return "worker " + std::to_string(env.worker_id);
  }
}

// Pushes this aggregator must have applied: with djb2 hashing the partitions hashed to the server, every
// iteration (those the round plan has pushed); with ps.balancing = "lb" the partitions each iteration's
// decision (as this node took it up) gives its aggregator slot, so moving a key to another node is not
// counted as a lost update. `slot`: a server's rank, or servers + rank for a worker aggregator
// (lb.worker_aggregators, whose own pushes to its range count as well: they reach it by loopback).
void check_updates(const Scenario& sc, const SyntheticWorkload& workload, int slot, NodeId id,
                   const NodeStats& stats, InvariantChecker& checker) {
  const auto workers = static_cast<std::uint64_t>(workload.workers());
  const RoundPlan plan(sc, workload);  // train.participation / drop_rate: the pushes it calls for
  std::uint64_t expected = 0;
  std::string missing;
  for (int it = 0; it < workload.iterations(); ++it) {
    if (sc.lb.balancing != Balancing::kLb) {
      for (const auto& p : workload.partitions())
        if (p.server_rank == slot) {
          int pushes = 0;
          for (int w = 0; w < workload.workers(); ++w)
            if (!stats.lost.contains(w) && plan.pushes(w, static_cast<std::uint32_t>(it), p.tensor)) ++pushes;
          // ps.backup_workers: a round needs all but b; stragglers may stop before their last rounds.
          expected += static_cast<std::uint64_t>(
              sc.ps.backup_workers > 0 ? std::max(1, pushes - sc.ps.backup_workers) : pushes);
        }
      continue;
    }
    const auto found = stats.decisions.find(static_cast<std::uint32_t>(it));
    if (found == stats.decisions.end())
      missing += (missing.empty() ? "" : ", ") + std::to_string(it);
    else
      expected += (workers - stats.lost.size() - static_cast<std::uint64_t>(sc.ps.backup_workers)) *
                  found->second.partitions_of(slot);
  }
  // A lost worker's pushes count as far as it got: each once (duplicates are caught as they come).
  if (sc.ps.backup_workers == 0)
    for (const auto& entry : stats.applied)
      if (stats.lost.contains(std::get<2>(entry))) ++expected;
  checker.count_check("updates");
  if (!missing.empty())
    checker.add({"updates", "server " + std::to_string(id) +
                                " completed without a load-balancing decision for "
                                "iteration(s) " +
                                missing + ": cannot tell which pushes it owed"});
  else if (stats.applied.size() < expected)
    checker.add({"updates", std::to_string(expected - stats.applied.size()) + " of " +
                                std::to_string(expected) + " pushes to server " + std::to_string(id) +
                                " were never applied (lost updates)"});
  else if (stats.applied.size() > expected && sc.ps.backup_workers == 0)
    checker.add({"updates", "server " + std::to_string(id) + " applied " +
                                std::to_string(stats.applied.size()) + " pushes, more than the " +
                                std::to_string(expected) + " it owned"});
}

// Called by the scheduler once it holds the root port, before any node can register: no live job on
// this host uses `prefix` then, so an object under it was left by an earlier job's node that was
// killed with -9 (no process can unlink on SIGKILL). A new job would otherwise open it as its own.
void sweep_staging_left_behind(const std::string& prefix, const std::string& label,
                               const std::function<void(const std::string&)>& log) {
  if (const std::size_t swept = ShmStaging::unlink_all(prefix); swept > 0)
    log("[pstwin] " + label + ": removed " + std::to_string(swept) + " staging object(s) /dev/shm/" + prefix +
        "* left by an earlier job on this port (a node killed with kill -9 cannot remove its own)");
}

// The host whose staging this node shares: PSTWIN_HOST (`pstwin run` sets the scenario host), else
// this machine's host name, as every process on one machine shares its /dev/shm.
std::string host_of(const NodeEnv& env) {
  if (!env.host.empty()) return env.host;
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "localhost";
  return name.data();
}

std::string time_limit_text(double limit_s, std::uint64_t iterations, Role role) {
  std::ostringstream out;
  out << "run.time_limit of " << limit_s << " s (wall clock) reached";
  if (role == Role::kWorker) out << " after " << iterations << " iteration(s)";
  out << " before the job ended";
  return out.str();
}

}  // namespace

NodeRunResult run_node(const Scenario& sc, const NodeEnv& env, const NodeRunOptions& options) {
  auto log = [&](const std::string& line) {
    if (options.log)
      options.log(line);
    else
      std::cerr << line + "\n";
  };
  const std::string label = label_of(env);
  if (env.job_token.empty()) {
    if (sc.ps.require_token)
      throw NodeEnvError(
          "PSTWIN_JOB_TOKEN is not set and the scenario asks for it (ps.require_token = true): set it to "
          "the job's secret, the same on every node (e.g. the output of `openssl rand -hex 32`), or set "
          "ps.require_token = false to run unauthenticated");
    log("[pstwin] " + label +
        ": PSTWIN_JOB_TOKEN is not set: this node runs unauthenticated (any process that reaches its "
        "port can join the job; docs/SECURITY.md)");
  }
  if (sc.ps.require_encryption && !env.encrypt)
    throw NodeEnvError(
        "PSTWIN_ENCRYPT is not curve and the scenario asks for encryption (ps.require_encryption = true): "
        "set PSTWIN_ENCRYPT=curve on every node (it needs PSTWIN_JOB_TOKEN and the zmq van), or set "
        "ps.require_encryption = false to run unencrypted");
  // Said once, either way: whoever reads the log knows whether the path could read the gradients.
  log("[pstwin] " + label +
      (env.encrypt
           ? ": traffic is encrypted (ZeroMQ CURVE, keys derived from the job token)"
           : ": traffic is not encrypted (anyone on the network path can read it; PSTWIN_ENCRYPT=curve "
             "encrypts the zmq van's; docs/SECURITY.md)"));
  const zeno::JobRoles roles(sc, cuda::device_factory(), cuda::mlp_step_factory());
  const SyntheticWorkload& workload = roles.workload();
  InvariantChecker checker(sc, workload);
  NodeStats stats(sc, env.verbose, [&](const std::string& line) { log("[pstwin] " + label + ": " + line); });
  // The scheduler reports no accuracy: it holds no model.
  const TrainingModel* training = env.role == Role::kScheduler ? nullptr : roles.training();
  AccuracyRecorder accuracy;
  // The scheduler makes the load-balancing decisions and receives the rates: it records them for the
  // merged results.json's `balancing` section.
  std::optional<RunRecorder> balancing;
  std::vector<RunObserver*> observers{&checker, &stats, &accuracy};
  if (env.role == Role::kScheduler && sc.lb.balancing == Balancing::kLb)
    observers.push_back(&balancing.emplace(sc, workload));
  ValidationRecorder validation;  // a validator's accept counts, merged into results.json's `validation`
  if (env.role == Role::kValidator) observers.push_back(&validation);
  SelectionRecorder selection(sc.zeno.rule);  // a server's robust rule, merged into `selection`
  if (env.role == Role::kServer) observers.push_back(&selection);
  // Whoever aggregates (servers, worker aggregators) counts the pushes it applied and refused under
  // ps.max_staleness; merged into results.json's `staleness`.
  StalenessRecorder staleness{static_cast<std::uint64_t>(std::max(0, sc.ps.max_staleness))};
  const bool counts_staleness =
      sc.ps.max_staleness > 0 && (env.role == Role::kServer || env.role == Role::kWorker);
  if (counts_staleness) observers.push_back(&staleness);
  // faults.crashes at an iteration: this worker's loop reports it, and stops itself at once.
  // It also records the workers the scheduler declared lost, for results.json.
  LoopRuntime* self_runtime = nullptr;
  CrashObserver crashes(sc, [&](int worker) {
    if (env.role == Role::kWorker && worker == env.worker_id)
      self_runtime->crash("crashed by faults.crashes as it would start its next iteration (as kill -9)");
  });
  if (crashes.needed()) observers.push_back(&crashes);
  ObserverFanout fanout(std::move(observers));
  LockedObserver observer(fanout);
  // One job's staging objects are kept apart from another's by the scheduler port and, within the job,
  // one host's from another's by the host (several emulated hosts share this machine's /dev/shm); on
  // one host names collide exactly when staging.naming makes them equal.
  auto staging = std::make_shared<ShmStaging>(host_staging_prefix(env.root_port, host_of(env)));
  // Before any thread starts: Ctrl-C or a plain `kill` stops the node cleanly, staging unlinked.
  StopSignals stop_signals;
  LocalHost host({sc.output, options.log, staging, [&sc](NodeId id) { return node_host(sc, id); }});

  // The scheduler binds the root address, the others DMLC_NODE_HOST: that address's interface.
  const double nic_rate_Bps =
      env.nic_rate_auto ? resolve_nic_rate(env.role == Role::kScheduler ? env.root_uri : env.node_host)
                        : env.nic_rate_Bps;
  if (env.nic_rate_auto && env.verbose > 0)
    log("[pstwin] " + label +
        ": PSTWIN_NIC_RATE=auto: " + std::to_string(static_cast<std::uint64_t>(nic_rate_Bps)) + " bytes/s");
  auto runtime = make_node_runtime(env.van, host,
                                   NodeRuntimeOptions{.label = label,
                                                      .seed = sc.seed,
                                                      .bind = env.bind_address(),
                                                      .linger_ms = 1000,
                                                      .nic_rate_Bps = nic_rate_Bps,
                                                      .kernel_pacing = env.kernel_pacing,
                                                      .job_token = env.job_token,
                                                      .encrypt = env.encrypt,
                                                      .max_payload_bytes = max_frame_payload(sc, workload)});
  LoopRuntime& rt = *runtime;
  self_runtime = &rt;
  rt.inject_faults(sc, env.job_start_s, env.kernel_partitions);
  // Every host's leftovers of this port that this machine holds (the whole job's, with `pstwin run`).
  if (env.role == Role::kScheduler) sweep_staging_left_behind(job_staging_prefix(env.root_port), label, log);
  if (env.role == Role::kValidator && !training)
    throw NodeEnvError("DMLC_WORKER_TYPE=validator: validators need workload.kind = \"mlp\" in the scenario");
  const int rank = env.role == Role::kWorker      ? env.worker_id
                   : env.role == Role::kValidator ? env.validator_id
                                                  : -1;
  // With ps.resend the protocol sits behind a Resender (ps/resend.hpp), as in the simulator.
  std::unique_ptr<Node> protocol = with_resend(rt, sc, label, [&](Runtime& r) {
    return roles.make(env.role, rank, r, observer, env.scheduler_address());
  });
  auto counter = std::make_unique<ReceiveCounter>(std::move(protocol));
  const ReceiveCounter& received = *counter;
  rt.attach(std::move(counter));
  if (env.verbose >= 1) log("[pstwin] " + label + ": listening on " + rt.local_address());
  rt.start();
  // run.time_limit, wall clock (sim.max_time is simulated time). Heartbeats and the connect timeout end
  // a stuck job sooner; this bounds a job that runs too long or a protocol hang.
  const double time_limit_s = sc.run.time_limit_s;
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(time_limit_s));
  bool stopped = false;
  int interrupted_by = 0;
  while (!stopped && !host.failed() && std::chrono::steady_clock::now() < deadline) {
    stopped = host.wait_all_stopped(1, std::min(deadline, std::chrono::steady_clock::now() + kSignalPoll));
    if (!stopped && (interrupted_by = stop_signals.take()) != 0) {
      // Failed through the loop, so the node tells the scheduler it is leaving and the job's other
      // nodes end at once, not after ps.heartbeat_timeout. A loop that does not take it soon (it
      // never blocks that long) is failed from here.
      const std::string why = std::string("interrupted by ") +
                              (interrupted_by == SIGINT ? "SIGINT" : "SIGTERM") +
                              ": stopped before the job ended";
      rt.fail(why);
      host.wait_all_stopped(1, std::chrono::steady_clock::now() + kLastWordGrace);
      if (!host.failed()) host.fail(label, why);
    }
  }
  // A stop signal that came while the node was failing for another reason (`pstwin run` stops every
  // node when one fails, and the scheduler's notice may come first) is taken here: left pending, it
  // would kill the process when StopSignals restores the mask, before the node writes its report.
  if (interrupted_by == 0) interrupted_by = stop_signals.take();
  rt.halt();
  const NodeId id = env.role == Role::kScheduler ? kSchedulerId : rt.self();
  const std::string state = rt.describe();
  const std::string address = rt.local_address();
  const std::uint64_t bytes_received = received.bytes();
  const bool crashed = rt.crashed();
  const std::string crash_reason = rt.crash_reason();
  std::optional<FaultCounts> faults;
  if (sc.faults.any() || sc.resend_enabled()) {
    faults.emplace();
    faults->resend_enabled = sc.resend_enabled();
    add_fault_counts(*faults, rt.fault_counts());
    add_resend_counts(received.inner(), *faults);
    faults->lost_workers = crashes.lost();
  }
  const Refusals refused = rt.refusals();
  runtime.reset();  // joins every thread (and flushes the last replies) before the checks are read
  RunReport sent;   // LocalHost counts what this node transmitted
  host.fill(sent);

  const bool completed = stopped && !host.failed() && !crashed;
  // The cross-process lost-update check, done per aggregator for the keys it owns: every server, and
  // with lb.worker_aggregators every worker too.
  const bool aggregates =
      env.role == Role::kServer ||
      (env.role == Role::kWorker && sc.lb.worker_aggregators && sc.lb.balancing == Balancing::kLb);
  if (completed && aggregates && sc.invariants.updates && id != kNoNode)
    check_updates(sc, workload, slot_of(id, sc.roles.servers), id, stats, checker);

  NodeRunResult result;
  std::ostringstream details;
  if (crashed)
    details << "failure: " << crash_reason << "\n";
  else if (host.failed())
    details << "failure: " << host.failure() << "\n";
  else if (!stopped)
    details << "failure: " << time_limit_text(time_limit_s, stats.iterations, env.role) << ": " << state
            << "\n";
  for (const auto& v : checker.violations())
    details << "violation [" << v.invariant << "] " << v.detail << "\n";
  result.details = details.str();
  result.exit_code = completed && checker.violation_count() == 0 ? 0 : 1;
  if (interrupted_by != 0)
    result.exit_code = 128 + interrupted_by;  // as a shell reports a killed process
  else if (crashed)
    result.exit_code = 128 + SIGKILL;  // faults.crashes stands for kill -9
  // Refused at registration (another job's scenario): bad configuration, as a misspelled variable.
  else if (host.configuration_failure())
    result.exit_code = 2;

  std::ostringstream summary;
  summary << "pstwin node: " << role_name(env.role);
  if (id != kNoNode)
    summary << " rank " << rank_of(id) << " (node " << id << ")";
  else
    summary << " (no node id: never joined)";
  summary << ": ";
  if (env.role == Role::kWorker) summary << stats.iterations << " iterations, ";
  if (env.role == Role::kServer) summary << stats.aggregates << " aggregates, ";
  summary << checker.checked() << " checks, " << checker.violation_count()
          << " violations: " << (result.exit_code == 0 ? "ok" : "FAILED");
  result.summary = summary.str();

  NodePart& part = result.part;
  part.role = env.role;
  part.id = id;
  part.rank = id == kNoNode ? -1 : rank_of(id);
  part.address = address;
  part.scheduler = env.scheduler_address();
  part.scenario = resolved_toml(sc);
  part.completed = completed;
  part.crashed = crashed;
  part.faults = std::move(faults);
  if (crashed)
    part.failure = crash_reason;
  else if (host.failed())
    part.failure = host.failure();
  else if (!stopped)
    part.failure = time_limit_text(time_limit_s, stats.iterations, env.role) + ": " + state;
  part.checked = checker.checked();
  part.violation_count = checker.violation_count();
  part.violations = checker.violations();
  part.tallies = checker.tallies();
  part.iterations = std::move(stats.times);
  part.digests = std::move(stats.digests);
  part.nodes = std::move(stats.nodes);
  part.bytes_sent = sent.message_bytes;
  part.cross_host = sent.cross_host;
  part.bytes_received = bytes_received;
  part.refused = refused;
  part.messages = sent.messages;
  part.epoch_s = host.epoch_s();
  part.trace = std::move(sent.trace);
  part.trace_dropped = sent.trace_dropped;
  if (training) part.accuracy = accuracy.evaluate(*training);  // the run is over: not in its times
  if (env.role == Role::kValidator) part.validation = validation.summary();
  if (selection.judged_any()) part.selection = selection.summary();
  if (counts_staleness) part.staleness = staleness.summary();
  if (balancing) {
    RunReport recorded;
    balancing->fill(recorded);
    part.balancing = std::move(recorded.balancing);
  }
  // The node is ending anyway: a stop signal that came while it wound down (up to its linger time) must
  // not kill it before its summary and report are out. One after run_node returns still does.
  while (stop_signals.take() != 0) {
  }
  return result;
}

}  // namespace pstwin::realnet
