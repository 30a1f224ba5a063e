#include "sim/simulation.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <simgrid/s4u.hpp>
#include <sstream>

#include "core/assert.hpp"
#include "ps/ids.hpp"
#include "ps/resend.hpp"
#include "report/run_observers.hpp"
#include "sim/cluster.hpp"
#include "zeno/roles.hpp"

namespace pstwin::sim {
namespace s4u = simgrid::s4u;

namespace {

std::string address_of(std::string_view role, int rank, const std::string& host) {
  return std::string(role) + std::to_string(rank) + "@" + host;
}

// Ends a run that stopped making progress (a protocol deadlock hidden behind heartbeats).
void watch_for_stalls(Cluster& cluster, Seconds window) {
  while (true) {
    s4u::this_actor::sleep_for(window / 4);
    if (s4u::Engine::get_clock() - cluster.last_progress() > window) {
      std::ostringstream out;
      out << "no protocol progress for " << window << " simulated seconds";
      if (const auto& counts = cluster.fault_counts(); !counts.first_drop.empty())
        out << " after injected faults dropped " << counts.lost + counts.partitioned
            << " message(s) (the first: " << counts.first_drop << ")"
            << (cluster.scenario().resend_enabled() ? "" : " and ps.resend = false resent none");
      out << "; node states:";
      for (const auto& node : cluster.nodes())
        if (!node->stopped()) out << "\n    " << node->describe();
      cluster.fail("simulator", out.str());
      s4u::Actor::kill_all();
      return;
    }
  }
}

// faults.crashes: stops nodes dead at a simulated time, or a worker as it would start an iteration;
// and records the workers the scheduler declared lost (ps.on_worker_loss = "continue").
class CrashSchedule final : public RunObserver {
 public:
  explicit CrashSchedule(Cluster& cluster) : cluster_(cluster) {}

  void start(const std::vector<CrashFault>& crashes, simgrid::s4u::Host* host) {
    for (const auto& crash : crashes) {
      SimNode* node = find(crash.node);
      if (!node) continue;  // validation names every node that exists
      if (crash.iteration && *crash.iteration > 0) {
        at_iteration_.emplace(std::make_pair(rank_of_label(crash.node), *crash.iteration - 1), node);
        continue;
      }
      const Seconds at = crash.at_s.value_or(0);
      create_actor("crash " + crash.node, host, [node, at] {
        s4u::this_actor::sleep_until(at);
        node->crash();
      })->daemonize();
    }
  }
  void iteration_done(int worker, std::uint32_t iteration, Seconds /*start*/, Seconds /*end*/) override {
    if (auto it = at_iteration_.find({worker, iteration}); it != at_iteration_.end()) it->second->crash();
  }
  void worker_lost(int worker, Seconds at) override {
    if (!reported_.insert(worker).second) return;  // the scheduler and every node tell it
    std::ostringstream out;
    out << "worker " << worker << " at " << at << " s";
    lost_.push_back(out.str());
  }
  const std::vector<std::string>& lost() const { return lost_; }

 private:
  SimNode* find(std::string_view label) const {
    for (const auto& node : cluster_.nodes())
      if (node->label() == label) return node.get();
    return nullptr;
  }
  static int rank_of_label(std::string_view label) {
    return std::stoi(std::string(label.substr(label.find(' ') + 1)));
  }

  Cluster& cluster_;
  std::map<std::pair<int, std::uint32_t>, SimNode*> at_iteration_;  // (worker, last iteration it finishes)
  std::vector<std::string> lost_;
  std::set<int> reported_;
};

// A run still going at sim.max_time ends there: how far it got, and what each node was doing.
std::string time_limit_failure(const Scenario& sc, const RunObservers& observers, const std::string& stuck) {
  RunReport reached;
  observers.recorder.fill(reached);
  std::ostringstream out;
  out << "time limit " << sc.sim.max_time_s << " s (sim.max_time) reached after " << reached.iterations.size()
      << " of " << sc.workload.iterations << " iterations, before every node stopped:" << stuck;
  return out.str();
}

// Kills every actor left and lets each unwind its stack (their waits hold references to the
// cluster's condition variables), so the cluster can be destroyed.
void end_remaining_actors(s4u::Engine& engine) {
  if (engine.get_actor_count() == 0) return;
  s4u::Actor::kill_all();
  engine.run();
}

}  // namespace

RunReport run_simulation(const Scenario& sc, const SimOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  // An assertion that fires in a simulated run fires again on replay: say how.
  set_assertion_context("replay: " + replay_command(sc, sc.seed));
  EngineArguments arguments("pstwin");
  s4u::Engine engine(arguments.argc(), arguments.argv());
  // A training step (Eigen, whose temporaries may take up to 128 KiB of stack) runs on an actor.
  const int stack_kb =
      sc.workload.kind == WorkloadKind::kMlp ? std::max(sc.sim.stack_size_kb, 1024) : sc.sim.stack_size_kb;
  s4u::Engine::set_config("contexts/stack-size:" + std::to_string(stack_kb));
  configure_network_model(sc);
  for (const auto& setting : sc.sim.simgrid_config) {
    try {
      s4u::Engine::set_config(setting);
    } catch (const std::exception& e) {
      const std::string why = e.what();
      throw ScenarioError("sim.simgrid_config: \"" + setting + "\" is not a SimGrid setting (" +
                          why.substr(0, why.find('\n')) +
                          "); write \"name:value\" as for --cfg, e.g. \"network/crosstraffic:0\"");
    }
  }
  Platform platform = build_platform(sc);

  const zeno::JobRoles roles(sc);
  RunObservers observers(sc, roles.training());
  // Each violation is marked in trace.json where and when it was seen.
  observers.checker.set_clock([] { return s4u::Engine::get_clock(); });
  Cluster cluster(sc, platform);
  // Every span, kept in trace.json or not, feeds the time breakdown.
  cluster.set_span_sink([&observers](const SpanView& span) { observers.breakdown.span(span); });
  CrashSchedule crashes(cluster);
  ObserverFanout with_crashes({&observers.fanout, &crashes});
  RunObserver& observer = sc.faults.crashes.empty() && !sc.ps.continues_on_worker_loss()
                              ? static_cast<RunObserver&>(observers.fanout)
                              : with_crashes;

  const std::string scheduler_host = sc.scheduler_host_name();
  const std::string scheduler_address = "scheduler@" + scheduler_host;
  auto& scheduler = cluster.add_node("scheduler", scheduler_address, scheduler_host);
  scheduler.attach(with_resend(scheduler, sc, "scheduler", [&](Runtime& rt) {
    return roles.make(Role::kScheduler, 0, rt, observer, "");
  }));
  std::vector<SimNode*> started{&scheduler};
  // One node per rank of a role, on the host the scenario places it.
  auto add_role = [&](Role role, int count, auto host_of) {
    const std::string name(role_name(role));
    for (int r = 0; r < count; ++r) {
      const auto host = (sc.*host_of)(r);
      auto& node = cluster.add_node(name + " " + std::to_string(r), address_of(name, r, host), host);
      node.attach(with_resend(node, sc, node.label(), [&](Runtime& rt) {
        return roles.make(role, r, rt, observer, scheduler_address);
      }));
      started.push_back(&node);
    }
  };
  add_role(Role::kServer, sc.roles.servers, &Scenario::server_host_name);
  add_role(Role::kWorker, sc.roles.workers, &Scenario::worker_host_name);
  add_role(Role::kValidator, sc.roles.validators, &Scenario::validator_host_name);
  for (auto* node : started) {
    Seconds delay = node == &scheduler ? sc.faults.scheduler_start_delay_s : 0;
    if (sc.perturbation.start_jitter_s > 0)
      delay += node->random("start").uniform(0, sc.perturbation.start_jitter_s);
    node->spawn(delay);
  }
  crashes.start(sc.faults.crashes, cluster.host(scheduler_host));
  const Seconds stall_window = std::max(30.0, 3 * sc.ps.heartbeat_timeout_s);
  create_actor("stall-watch", cluster.host(scheduler_host), [&] {
    watch_for_stalls(cluster, stall_window);
  })->daemonize();

  if (options.progress) {
    auto last = std::chrono::steady_clock::now();
    s4u::Engine::on_time_advance_cb([&, last](double) mutable {
      const auto now = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(now - last).count() < options.progress_interval_wall_s) return;
      last = now;
      RunReport partial;
      observers.recorder.fill(partial);
      std::ostringstream out;
      out << "simulated " << s4u::Engine::get_clock() << " s, " << partial.iterations.size() << " of "
          << sc.workload.iterations << " iterations, wall "
          << std::chrono::duration<double>(now - wall_start).count() << " s";
      options.progress(out.str());
    });
  }

  engine.run_until(sc.sim.max_time_s);

  RunReport report;
  report.scenario = sc.name;
  report.backend = "sim";
  report.seed = sc.seed;
  report.lb_chosen = sc.lb_chosen;
  const Seconds run_time =
      cluster.failed() || cluster.last_stop() > 0 ? cluster.last_stop() : s4u::Engine::get_clock();
  bool all_stopped = true;
  std::ostringstream stuck;
  for (const auto& node : cluster.nodes())
    if (!node->stopped()) {
      all_stopped = false;
      stuck << "\n    " << node->describe();
    }
  report.completed = all_stopped && !cluster.failed();
  if (cluster.failed())
    report.failure = cluster.failure();
  else if (!all_stopped)
    report.failure = time_limit_failure(sc, observers, stuck.str());
  observers.finish_run(report);
  cluster.fill(report, run_time);
  if (sc.faults.any() || sc.resend_enabled()) {
    FaultCounts counts = cluster.fault_counts();
    counts.resend_enabled = sc.resend_enabled();
    counts.lost_workers = crashes.lost();
    for (const auto& node : cluster.nodes()) add_resend_counts(node->protocol(), counts);
    report.faults = counts;
    // A dropped message nobody resent is a correctness violation, named as such, not just a stall.
    const std::uint64_t dropped = counts.lost + counts.partitioned;
    if (!report.completed && dropped > 0 && !counts.resend_enabled) {
      observers.checker.count_check("delivery");
      observers.checker.add({"delivery", std::to_string(dropped) +
                                             " message(s) dropped by injected faults were never resent "
                                             "(ps.resend = false), the first: " +
                                             counts.first_drop + "; the run did not complete"});
    }
  }
  report.run_time_s = run_time;
  report.breakdown = observers.breakdown.finish(run_time, sc.ps.scheduling_credit);
  // SMPI's factors depend on message size: no constant-factor closed form. Training compute is
  // FLOPs on a shared host, not workload.compute: not in the bound's formula either.
  // ps.balancing = "lb": the optimum over all splits, next to the mean of the balanced iterations.
  const bool balanced = sc.lb.balancing == Balancing::kLb;
  if (sc.network.model != "SMPI" && !observers.training)
    report.bound = (balanced ? balanced_bound : analytic_bound)(
        sc, observers.workload, platform.bandwidth_factor, platform.latency_factor, platform.cross_traffic);
  if (report.bound)
    report.bound->achieved_s =
        balanced && report.balancing ? report.balancing->balanced_mean_s : report.mean_iteration_s();
  if (report.bound && sc.invariants.bound_tolerance > 0) observers.checker.count_check("bound");
  if (report.bound && sc.invariants.bound_tolerance > 0 && report.completed &&
      report.bound->achieved_s > report.bound->time_s * (1 + sc.invariants.bound_tolerance)) {
    std::ostringstream out;
    out << (balanced ? "mean balanced iteration time " : "mean iteration time ") << report.bound->achieved_s
        << " s exceeds the analytic bound " << report.bound->time_s << " s by more than "
        << sc.invariants.bound_tolerance * 100 << " %";
    observers.checker.add({"bound", out.str()});
  }
  observers.fold_invariants(report);
  report.replay = replay_command(sc, sc.seed);
  report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  // Cut off at sim.max_time, actors still wait on the cluster's condition variables, and SimGrid
  // aborts when one goes while waited on: the actors unwind first.
  if (!all_stopped) end_remaining_actors(engine);
  return report;
}

namespace {

constexpr const char* kProbeRefusal = "probe refused: ";

// The probe's child: the scenario's SimGrid settings on two hosts, one message between them.
[[noreturn]] void probe_simgrid_child(const Scenario& sc) {
  try {
    EngineArguments arguments("pstwin");
    s4u::Engine engine(arguments.argc(), arguments.argv());
    s4u::Engine::set_config("contexts/stack-size:" + std::to_string(sc.sim.stack_size_kb));
    configure_network_model(sc);
    for (const auto& setting : sc.sim.simgrid_config) s4u::Engine::set_config(setting);
    auto* zone = s4u::create_full_zone("probe");
    auto* from = zone->create_host("h0", 1e9);
    auto* to = zone->create_host("h1", 1e9);
    auto* link = zone->create_link("link", 1e9)->set_latency(1e-6)->seal();
    zone->add_route(from->get_netpoint(), to->get_netpoint(), nullptr, nullptr, {s4u::LinkInRoute(link)},
                    true);
    zone->seal();
    static int token = 0;
    create_actor("send", from, [] { s4u::Mailbox::by_name("probe")->put(&token, 1000); });
    create_actor("receive", to, [] { (void)s4u::Mailbox::by_name("probe")->get<int>(); });
    engine.run();
  } catch (const std::exception& e) {
    const std::string why = e.what();  // SimGrid lists every setting after the first line
    std::fprintf(stderr, "%s%s\n", kProbeRefusal, why.substr(0, why.find('\n')).c_str());
    std::fflush(stderr);
    _exit(3);
  }
  _exit(0);
}

}  // namespace

void check_simgrid_config(const Scenario& sc) {
  if (sc.sim.simgrid_config.empty()) return;
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error("pipe: " + std::string(std::strerror(errno)));
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) throw std::runtime_error("fork: " + std::string(std::strerror(errno)));
  if (child == 0) {
    close(pipe_fds[0]);
    dup2(pipe_fds[1], STDERR_FILENO);
    dup2(pipe_fds[1], STDOUT_FILENO);
    probe_simgrid_child(sc);
  }
  close(pipe_fds[1]);
  std::string said;
  char buffer[4096];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (said.size() < (1 << 16)) said.append(buffer, static_cast<std::size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  // What the probe caught, else SimGrid's CRITICAL line (it logs, then aborts), else its last line.
  std::string why, last;
  std::istringstream lines(said);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(kProbeRefusal))
      why = line.substr(std::string_view(kProbeRefusal).size());
    else if (const auto at = line.find("CRITICAL] "); at != std::string::npos && why.empty())
      why = line.substr(at + 10);
    if (!line.empty()) last = line;
  }
  if (why.empty()) why = last;
  if (why.empty())
    why = WIFSIGNALED(status) ? "it stopped with signal " + std::to_string(WTERMSIG(status)) : "it failed";
  std::string settings;
  for (const auto& setting : sc.sim.simgrid_config)
    settings += (settings.empty() ? "\"" : ", \"") + setting + "\"";
  throw ScenarioError("sim.simgrid_config = [" + settings + "]: SimGrid refuses it: " + why +
                      "; fix or remove the setting");
}

namespace {

// The child: run, write the report as JSON to `path`, exit without running parent-owned destructors.
[[noreturn]] void run_child(const Scenario& scenario, const std::string& path) {
  std::string text;
  try {
    text = to_json(run_simulation(scenario)).dump();
  } catch (const std::exception& e) {
    text = nlohmann::ordered_json{{"__error", e.what()}}.dump();
  }
  FILE* out = std::fopen(path.c_str(), "wb");
  if (!out || std::fwrite(text.data(), 1, text.size(), out) != text.size() || std::fclose(out) != 0) _exit(3);
  _exit(0);
}

RunReport collect_child(const Scenario& scenario, const std::string& path, int status) {
  std::string text;
  if (FILE* in = std::fopen(path.c_str(), "rb")) {
    char buffer[1 << 16];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, in)) > 0;) text.append(buffer, n);
    std::fclose(in);
  }
  std::remove(path.c_str());
  if (!text.empty()) {
    auto json = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (json.is_object() && json.contains("__error")) throw ScenarioError(json["__error"].get<std::string>());
    if (json.is_object()) return report_from_json(json);
  }
  RunReport report;
  report.scenario = scenario.name;
  report.backend = "sim";
  report.seed = scenario.seed;
  report.replay = replay_command(scenario, scenario.seed);
  report.failure = "the simulation process died (" +
                   (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                        : "exit status " + std::to_string(WEXITSTATUS(status))) +
                   ") before reporting";
  report.violation_count = 1;
  report.violations.push_back({"run", report.failure});
  return report;
}

// A rough measure of a run's cost for ordering only: the messages it sends (each worker pushes and
// pulls every partition every iteration).
double estimated_cost(const Scenario& scenario) {
  double partitions = 0;
  const double part = static_cast<double>(std::max<std::uint64_t>(scenario.ps.partition_bytes, 1));
  for (const auto bytes : scenario.declared_tensor_bytes())
    partitions += std::max(1.0, std::ceil(static_cast<double>(bytes) / part));
  return static_cast<double>(scenario.roles.workers) * (1 + scenario.roles.servers) *
         std::max(scenario.workload.iterations, 1) * std::max(partitions, 1.0);
}

}  // namespace

std::vector<RunReport> run_isolated(const std::vector<Scenario>& scenarios, int jobs,
                                    const std::function<void(std::size_t, const RunReport&)>& on_done) {
  std::vector<RunReport> reports(scenarios.size());
  std::map<pid_t, std::size_t> running;
  const std::string prefix = "/tmp/pstwin-run-" + std::to_string(getpid()) + "-";
  // Costliest first, so that a sweep's largest points do not start last and run alone at the end.
  std::vector<std::size_t> order(scenarios.size());
  std::vector<double> cost(scenarios.size());
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    order[i] = i;
    cost[i] = estimated_cost(scenarios[i]);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  std::size_t started = 0;
  while (started < scenarios.size() || !running.empty()) {
    while (started < scenarios.size() && static_cast<int>(running.size()) < std::max(jobs, 1)) {
      const std::size_t next = order[started++];
      std::fflush(nullptr);
      const pid_t child = fork();
      if (child < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
      if (child == 0) run_child(scenarios[next], prefix + std::to_string(next) + ".json");
      running[child] = next;
    }
    int status = 0;
    const pid_t done = waitpid(-1, &status, 0);
    if (done < 0) throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
    auto it = running.find(done);
    if (it == running.end()) continue;
    const std::size_t index = it->second;
    running.erase(it);
    reports[index] = collect_child(scenarios[index], prefix + std::to_string(index) + ".json", status);
    if (on_done) on_done(index, reports[index]);
  }
  return reports;
}

}  // namespace pstwin::sim
