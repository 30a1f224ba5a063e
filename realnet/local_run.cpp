#include "realnet/local_run.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "cuda/cuda_tensors.hpp"
#include "ps/host_groups.hpp"
#include "ps/resend.hpp"
#include "realnet/job_auth.hpp"
#include "realnet/locked_observer.hpp"
#include "realnet/loop_pool.hpp"
#include "realnet/loop_runtime.hpp"
#include "report/run_observers.hpp"
#include "zeno/roles.hpp"

namespace pstwin::realnet {

// Mirrors sim::run_simulation: same nodes, same observers, same report, on sockets and threads.
// Not modelled yet: scheduler start delay, start/executor/delivery jitter (perturbation.*).
RunReport run_local(const Scenario& sc, const LocalRunOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  const zeno::JobRoles roles(sc, cuda::device_factory(), cuda::mlp_step_factory());
  RunObservers observers(sc, roles.training());
  std::vector<LoopRuntime*> workers;  // by rank
  // faults.crashes at an iteration: the worker's own loop reports it, so the crash is immediate.
  CrashObserver crashes(sc, [&](int worker) {
    workers.at(static_cast<std::size_t>(worker))
        ->crash("crashed by faults.crashes as it would start its next iteration (as kill -9)");
  });
  ObserverFanout with_crashes({&observers.fanout, &crashes});
  LockedObserver observer(crashes.needed() ? static_cast<RunObserver&>(with_crashes) : observers.fanout);
  LocalHost host({sc.output, options.log, nullptr, [&sc](NodeId id) { return node_host(sc, id); }});

  std::optional<LoopPool> pool;  // outlives the nodes
  if (options.shared_loops && options.van == Van::kEpoll) {
    const int nodes = 1 + sc.roles.servers + sc.roles.workers + sc.roles.validators;
    // One thread per CPU, at most one per node: more runnable loop threads than CPUs only add
    // context switches, and under load every extra thread is one more a compiler's time slice can
    // hold up (docs/PERFORMANCE.md, "Real backend on loopback").
    const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    pool.emplace(std::min(options.loop_threads > 0 ? options.loop_threads : cpus, nodes));
  }
  std::vector<std::unique_ptr<LoopRuntime>> nodes;
  const std::string job_token = options.job_token.value_or(JobKey::random_token());
  const std::uint64_t max_payload_bytes = max_frame_payload(sc, roles.workload());
  auto add = [&](std::string label) -> LoopRuntime& {
    const int pid = static_cast<int>(nodes.size());
    nodes.push_back(make_node_runtime(options.van, host,
                                      NodeRuntimeOptions{.label = std::move(label),
                                                         .pid = pid,
                                                         .seed = sc.seed,
                                                         .bind = "127.0.0.1:*",
                                                         .linger_ms = 0,
                                                         .job_token = job_token,
                                                         .encrypt = options.encrypt,
                                                         .max_payload_bytes = max_payload_bytes,
                                                         .pool = pool ? &*pool : nullptr}));
    nodes.back()->inject_faults(sc);
    return *nodes.back();
  };
  auto& scheduler = add("scheduler");
  // With ps.resend each protocol node sits behind a Resender (ps/resend.hpp), as in the simulator.
  scheduler.attach(with_resend(scheduler, sc, "scheduler", [&](Runtime& rt) {
    return roles.make(Role::kScheduler, 0, rt, observer, "");
  }));
  const std::string scheduler_address = scheduler.local_address();
  auto add_role = [&](Role role, int count) {
    for (int r = 0; r < count; ++r) {
      auto& node = add(std::string(role_name(role)) + " " + std::to_string(r));
      if (role == Role::kWorker) workers.push_back(&node);
      node.attach(with_resend(node, sc, node.label(), [&](Runtime& rt) {
        return roles.make(role, r, rt, observer, scheduler_address);
      }));
    }
  };
  add_role(Role::kServer, sc.roles.servers);
  add_role(Role::kWorker, sc.roles.workers);
  add_role(Role::kValidator, sc.roles.validators);
  for (auto& node : nodes) node->start();
  if (options.on_started) {
    std::vector<std::pair<std::string, std::string>> addresses;
    for (const auto& node : nodes) addresses.emplace_back(node->label(), node->local_address());
    options.on_started(addresses);
  }

  const double timeout_s = options.timeout_s > 0 ? options.timeout_s : std::min(sc.run.time_limit_s, 120.0);
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(timeout_s));
  const bool all_stopped = host.wait_all_stopped(static_cast<int>(nodes.size()), deadline);
  const Seconds end = host.now();
  // Halt every loop before reading protocol state from this thread.
  for (auto& node : nodes) node->halt();

  RunReport report;
  report.scenario = sc.name;
  report.backend = "real";
  report.van = std::string(van_name(options.van));
  report.seed = sc.seed;
  report.lb_chosen = sc.lb_chosen;
  std::ostringstream stuck;
  for (const auto& node : nodes)
    if (!node->stopped()) stuck << "\n    " << node->describe();
  report.completed = all_stopped && !host.failed();
  if (host.failed())
    report.failure = host.failure();
  else if (!all_stopped)
    report.failure =
        "wall-clock timeout of " + std::to_string(timeout_s) + " s before every node stopped:" + stuck.str();
  const Seconds run_time = host.failed() || host.last_stop() > 0 ? host.last_stop() : end;
  if (sc.faults.any() || sc.resend_enabled()) {
    FaultCounts counts;
    counts.resend_enabled = sc.resend_enabled();
    for (const auto& node : nodes) {
      add_fault_counts(counts, node->fault_counts());
      add_resend_counts(node->protocol(), counts);
    }
    counts.lost_workers = crashes.lost();
    report.faults = counts;
  }
  for (const auto& node : nodes)
    if (auto refused = node->refusals(); !refused.empty()) report.refused[node->label()] = std::move(refused);
  nodes.clear();  // joins every thread: nothing reports to the observers any more

  observers.finish_run(report);
  host.fill(report);
  report.run_time_s = run_time;
  observers.fold_invariants(report);
  report.replay = replay_command(sc, std::nullopt, "run");
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return report;
}

}  // namespace pstwin::realnet
