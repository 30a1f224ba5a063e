#include "cli/commands.hpp"
#include "cli/shards.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <thread>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "core/random.hpp"
#include "cuda/cuda_tensors.hpp"
#include "ps/host_groups.hpp"
#include "realnet/job_launch.hpp"
#include "realnet/job_parts.hpp"
#include "realnet/job_run.hpp"
#include "realnet/netns_cluster.hpp"
#include "realnet/node_address.hpp"
#include "realnet/node_env.hpp"
#include "realnet/node_run.hpp"
#include "realnet/zmq_runtime.hpp"
#include "report/compare.hpp"
#include "report/run_report.hpp"
#include "scenario/scenario.hpp"
#include "sim/simulation.hpp"

namespace pstwin::cli {
namespace {

Scenario load(const CommonOptions& common) {
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const auto& text : common.sets) overrides.push_back(split_override(text));
  return load_scenario(common.scenario_path, overrides);
}

// For the simulator's commands: also what only SimGrid can judge (sim.simgrid_config).
Scenario load_for_sim(const CommonOptions& common) {
  Scenario scenario = load(common);
  sim::check_simgrid_config(scenario);
  return scenario;
}

// Made and proven writable before the run, so a run's results are never lost at its end.
void prepare_out_dir(const std::string& dir, bool given) {
  namespace fs = std::filesystem;
  const std::string what = given ? "--out " + dir : "the output directory " + dir;
  std::error_code error;
  const auto status = fs::status(dir, error);
  if (fs::exists(status) && !fs::is_directory(status))
    throw ScenarioError(what + ": exists and is not a directory; choose a directory for the results");
  fs::create_directories(dir, error);
  if (error) throw ScenarioError(what + ": cannot create it (" + error.message() + "); choose another --out");
  const fs::path probe = fs::path(dir) / (".pstwin-write-test-" + std::to_string(getpid()));
  if (!std::ofstream(probe).good())
    throw ScenarioError(what + ": cannot write there; choose a writable directory with --out");
  fs::remove(probe, error);
}

std::string out_dir_of(const Scenario& scenario, const std::string& given) {
  const std::string dir = given.empty() ? "pstwin-out/" + scenario.name : given;
  prepare_out_dir(dir, !given.empty());
  return dir;
}

// The summary of a finished sim or run: stdout normally; with -q nothing on success and the whole
// summary (it holds the failure and the violations) on stderr otherwise.
void print_summary(const CommonOptions& common, const RunReport& report, const std::string& outputs,
                   const std::string& results_path) {
  if (common.quiet && report.ok()) return;
  (common.quiet ? std::cerr : std::cout) << summary_text(report, results_path) << outputs;
}

// A finished run's results.json, trace.json and resolved.toml in `out_dir` and its summary, listing
// them and `more_outputs`; the exit status.
int finish_run(const CommonOptions& common, const RunReport& report, const Scenario& scenario,
               const std::string& out_dir, const std::string& more_outputs) {
  write_outputs(report, scenario, out_dir);
  print_summary(common, report,
                "  outputs: " + out_dir + "/results.json" + (scenario.output.trace ? ", trace.json" : "") +
                    ", resolved.toml" + more_outputs + "\n",
                out_dir + "/results.json");
  return report.ok() ? 0 : 1;
}

// What of a run the seed can change, compared across seeds: timing, traffic, values and checks (not
// the seed itself, the replay command or the wall time). Equal for every seed: the seed changed nothing.
nlohmann::ordered_json seed_fingerprint(const RunReport& report) {
  nlohmann::ordered_json iterations = nlohmann::ordered_json::array();
  for (const auto& it : report.iterations) iterations.push_back({it.index, it.time_s});
  nlohmann::ordered_json violations = nlohmann::ordered_json::array();
  for (const auto& v : report.violations) violations.push_back({v.invariant, v.detail});
  return {{"completed", report.completed}, {"failure", report.failure},
          {"iterations", iterations},      {"run_time_s", report.run_time_s},
          {"messages", report.messages},   {"message_bytes", report.message_bytes},
          {"digest", report.model_digest}, {"checked", report.invariants_checked},
          {"violations", violations}};
}

}  // namespace

std::pair<std::string, std::string> split_override(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ScenarioError("--set " + text +
                        ": expected FIELD=VALUE, e.g. --set staging.naming=legacy-key-only");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

int run_sim(const CommonOptions& common, const SimOptions& options) {
  Scenario scenario = load_for_sim(common);
  if (options.seed) scenario.seed = *options.seed;
  const std::string out_dir = out_dir_of(scenario, options.out_dir);
  sim::SimOptions sim_options;
  if (!common.quiet)
    sim_options.progress = [](const std::string& line) { std::cerr << "[pstwin] " << line << "\n"; };
  const RunReport report = sim::run_simulation(scenario, sim_options);
  return finish_run(common, report, scenario, out_dir, "");
}

int run_check(const CommonOptions& common) {
  const Scenario scenario = load_for_sim(common);
  std::cout << resolved_toml(scenario);
  return 0;
}

namespace {

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(6) << seconds << "s";
  return out.str();
}

std::string probability_text(double p) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(4) << p;
  return out.str();
}

// Swarm testing (TigerBeetle's VOPR, Groce et al.): each seed switches every fault knob on or off
// and draws its parameters, so seeds explore different mixes instead of all faults at once. Drawn
// from RandomStream(seed, "swarm"), written as --set texts: the replay command carries them and
// parses them exactly as this run did. Windows are placed within an estimate of the run's length.
std::vector<std::pair<std::string, std::string>> draw_swarm(const Scenario& base, std::uint64_t seed) {
  RandomStream random(seed, "swarm");
  std::uint64_t model_bytes = 0;
  for (auto bytes : base.declared_tensor_bytes()) model_bytes += bytes;
  const double horizon = static_cast<double>(base.workload.iterations) *
                             (base.workload.compute_s +
                              4.0 * static_cast<double>(model_bytes) / base.cluster.host_bandwidth_Bps) +
                         0.01;
  // Windows shorter than a quarter of the heartbeat timeout: a partition the scheduler takes for a
  // dead node is a node crash, not in this model.
  const double longest = std::min(horizon / 2, base.ps.heartbeat_timeout_s / 4);
  std::vector<std::string> nodes;
  for (int r = 0; r < base.roles.servers; ++r) nodes.push_back("server " + std::to_string(r));
  for (int r = 0; r < base.roles.workers; ++r) nodes.push_back("worker " + std::to_string(r));
  auto pick_node = [&] { return nodes[random.below(nodes.size())]; };
  auto on = [&] { return random.below(2) == 1; };
  auto window = [&](double& from, double& length) {
    from = random.uniform(0, horizon);
    length = random.uniform(longest / 10, longest);
  };
  std::vector<std::pair<std::string, std::string>> sets;
  // Every knob draws the same numbers whether it is on or not, so one knob's switch never shifts another's.
  const bool loss = on(), duplicate = on(), partition = on(), clog = on(), slow = on();
  const double loss_p = random.uniform(0.001, 0.1), duplicate_p = random.uniform(0.001, 0.1);
  const std::string host =
      base.host_name(static_cast<int>(random.below(static_cast<std::uint64_t>(base.host_count()))));
  double partition_from = 0, partition_length = 0, clog_from = 0, clog_length = 0, slow_from = 0,
         slow_length = 0;
  window(partition_from, partition_length);
  const std::string clog_node = pick_node();
  window(clog_from, clog_length);
  const std::string slow_node = pick_node();
  const double factor = random.uniform(1.5, 10);
  window(slow_from, slow_length);
  if (loss) sets.emplace_back("faults.loss", probability_text(loss_p));
  if (duplicate) sets.emplace_back("faults.duplicate", probability_text(duplicate_p));
  if (partition)
    sets.emplace_back("faults.partitions", "[{hosts = [\"" + host + "\"], from = \"" +
                                               seconds_text(partition_from) + "\", until = \"" +
                                               seconds_text(partition_from + partition_length) + "\"}]");
  if (clog)
    sets.emplace_back("faults.clog", "[{nodes = [\"" + clog_node + "\"], from = \"" +
                                         seconds_text(clog_from) + "\", duration = \"" +
                                         seconds_text(clog_length) + "\"}]");
  if (slow)
    sets.emplace_back("faults.slow", "[{node = \"" + slow_node + "\", factor = " + probability_text(factor) +
                                         ", from = \"" + seconds_text(slow_from) + "\", until = \"" +
                                         seconds_text(slow_from + slow_length) + "\"}]");
  // Drawn after the knobs above, so adding it moved none of their numbers. A worker crash with
  // ps.on_worker_loss = "continue": the survivors must finish with every invariant intact.
  const bool crash =
      on() && base.roles.workers > 1 && base.roles.validators == 0 && !base.lb.worker_aggregators;
  const std::string crash_worker =
      "worker " + std::to_string(random.below(static_cast<std::uint64_t>(std::max(base.roles.workers, 1))));
  const double crash_at = random.uniform(0, horizon);
  if (crash) {
    sets.emplace_back("faults.crashes",
                      "[{node = \"" + crash_worker + "\", at = \"" + seconds_text(crash_at) + "\"}]");
    sets.emplace_back("ps.on_worker_loss", "continue");
  }
  return sets;
}

// A correctness problem (a failed run or any invariant but the analytic bound), or only a missed
// performance bound.
enum class Outcome { kClean, kSafety, kPerformance };
Outcome classify(const RunReport& report) {
  if (report.ok()) return Outcome::kClean;
  if (!report.completed) return Outcome::kSafety;
  for (const auto& [name, tally] : report.invariant_tallies)
    if (name != "bound" && tally.violated > 0) return Outcome::kSafety;
  return report.violation_count > 0 && report.invariant_tallies.contains("bound") ? Outcome::kPerformance
                                                                                  : Outcome::kSafety;
}

std::string_view outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::kClean:
      return "clean";
    case Outcome::kSafety:
      return "safety";
    case Outcome::kPerformance:
      return "performance";
  }
  return "";
}

}  // namespace

int run_explore(const CommonOptions& common, const ExploreOptions& options) {
  // The CLI, not protocol code: explore times itself for its seeds-per-second line only; no run reads it.
  const auto wall_start = std::chrono::steady_clock::now();
  const Scenario base = load_for_sim(common);
  if (options.seeds - 1 > std::numeric_limits<std::uint64_t>::max() - options.first_seed)
    throw ScenarioError("--first-seed " + std::to_string(options.first_seed) + " --seeds " +
                        std::to_string(options.seeds) + ": the last seed would pass " +
                        std::to_string(std::numeric_limits<std::uint64_t>::max()) + "; lower either");
  if (!options.out_dir.empty()) prepare_out_dir(options.out_dir, true);
  std::vector<Scenario> runs;
  std::vector<std::vector<std::pair<std::string, std::string>>> knobs;
  std::vector<std::pair<std::string, std::string>> user_sets;
  for (const auto& text : common.sets) user_sets.push_back(split_override(text));
  const Shard shard =
      options.shard.empty() ? Shard{} : parse_shard(options.shard, realnet::process_environment());
  for (std::uint64_t i = 0; i < options.seeds; ++i) {
    if (!shard.holds(i)) continue;
    const std::uint64_t seed = options.first_seed + i;
    if (options.swarm) {
      knobs.push_back(draw_swarm(base, seed));
      auto sets = user_sets;
      sets.insert(sets.end(), knobs.back().begin(), knobs.back().end());
      runs.push_back(load_scenario(common.scenario_path, sets));
    } else {
      runs.push_back(base);
    }
    runs.back().seed = seed;
  }
  std::size_t finished = 0;
  auto reports = sim::run_isolated(runs, options.jobs, [&](std::size_t, const RunReport&) {
    ++finished;
    if (!common.quiet && (finished % 100 == 0 || finished == runs.size()))
      std::cerr << "[pstwin] explored " << finished << " of " << runs.size() << " seeds\n";
  });
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  const double seeds_per_s = wall_s > 0 ? static_cast<double>(reports.size()) / wall_s : 0;
  std::size_t bad = 0;
  std::map<Outcome, std::size_t> outcomes;
  nlohmann::ordered_json summary = nlohmann::ordered_json::array();
  // Violations go to stderr with -q (nothing else is printed then), to stdout otherwise.
  std::ostream& out = common.quiet ? std::cerr : std::cout;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const auto& report = reports[i];
    const Outcome outcome = classify(report);
    ++outcomes[outcome];
    nlohmann::ordered_json entry = {
        {"seed", report.seed},
        {"ok", report.ok()},
        {"violation_count", report.violation_count},
        {"first_violation", report.violations.empty() ? "" : report.violations.front().detail},
        {"replay", report.replay}};
    // Correctness apart from a missed performance bound, for every explore.
    entry["class"] = outcome_name(outcome);
    if (options.swarm) {
      entry["failure"] = report.failure;
      entry["knobs"] = nlohmann::ordered_json::object();
      for (const auto& [field, value] : knobs[i]) entry["knobs"][field] = value;
      if (report.faults) entry["faults"] = faults_json(*report.faults);
    }
    summary.push_back(std::move(entry));
    if (report.ok()) continue;
    ++bad;
    out << "seed " << report.seed;
    if (options.swarm) out << " [" << outcome_name(outcome) << "]";
    out << ": " << report.violation_count << " violation(s)";
    if (!report.violations.empty())
      out << ", first [" << report.violations.front().invariant << "] " << report.violations.front().detail;
    else if (!report.failure.empty())
      out << ", run failed: " << report.failure.substr(0, report.failure.find('\n'));
    out << "\n  replay: " << report.replay << "\n";
  }
  const std::string range =
      std::to_string(options.first_seed) + ".." + std::to_string(options.first_seed + options.seeds - 1) +
      (shard.count > 1 ? ", shard " + std::to_string(shard.index) + "/" + std::to_string(shard.count) : "");
  if (!common.quiet || bad > 0) {
    if (options.swarm)
      out << "swarm explored " << reports.size() << " seeds (" << range << ") of " << base.name << ": "
          << outcomes[Outcome::kSafety] << " with safety violations, " << outcomes[Outcome::kPerformance]
          << " missing only a performance bound, " << outcomes[Outcome::kClean] << " clean\n";
    else
      out << "explored " << reports.size() << " seeds (" << range << ") of " << base.name << ": "
          << outcomes[Outcome::kSafety] << " with safety violations, " << outcomes[Outcome::kPerformance]
          << " missing only a performance bound, " << outcomes[Outcome::kClean] << " clean\n";
    out << "  " << std::fixed << std::setprecision(2) << seeds_per_s << " seeds/s (" << wall_s
        << " s wall, -j " << options.jobs << ")\n";
  }
  // N seeds that all ran alike explored one schedule, not N: say so rather than let "N clean" stand.
  const bool all_alike =
      !options.swarm && reports.size() > 1 && std::ranges::all_of(reports, [&](const RunReport& r) {
        return seed_fingerprint(r) == seed_fingerprint(reports.front());
      });
  if (all_alike && (!common.quiet || bad > 0))
    out << "note: every seed runs the same schedule (the " << reports.size()
        << " runs had the same iteration times, messages and results): the scenario has no randomness the "
           "seed changes, so they explored one interleaving; set perturbation.compute_jitter, "
           "executor_jitter, delivery_jitter or start_jitter (e.g. --set perturbation.delivery_jitter=20us) "
           "to explore\n";
  if (!options.out_dir.empty() && shard.count > 1) {
    // What `pstwin merge` needs to put the shards back together (src/cli/shards.hpp).
    nlohmann::ordered_json doc = {{"shard", {{"index", shard.index}, {"count", shard.count}}},
                                  {"scenario", base.name},
                                  {"swarm", options.swarm},
                                  {"seeds", options.seeds},
                                  {"first_seed", options.first_seed},
                                  {"jobs", options.jobs},
                                  {"wall_s", wall_s},
                                  {"runs", std::move(summary)}};
    std::ofstream(std::filesystem::path(options.out_dir) / shard.file_name("explore", "json"))
        << doc.dump(2) << "\n";
  } else if (!options.out_dir.empty()) {
    std::filesystem::create_directories(options.out_dir);
    if (options.swarm) {
      const auto n = static_cast<double>(std::max<std::size_t>(reports.size(), 1));
      auto tally = [&](Outcome o) {
        return nlohmann::ordered_json{{"count", outcomes[o]}, {"rate", static_cast<double>(outcomes[o]) / n}};
      };
      nlohmann::ordered_json doc = {{"scenario", base.name},
                                    {"swarm", true},
                                    {"seeds", reports.size()},
                                    {"first_seed", options.first_seed},
                                    {"jobs", options.jobs},
                                    {"wall_s", wall_s},
                                    {"seeds_per_s", seeds_per_s},
                                    {"safety", tally(Outcome::kSafety)},
                                    {"performance", tally(Outcome::kPerformance)},
                                    {"clean", tally(Outcome::kClean)},
                                    {"runs", std::move(summary)}};
      std::ofstream(options.out_dir + "/explore.json") << doc.dump(2) << "\n";
    } else {
      std::ofstream(options.out_dir + "/explore.json") << summary.dump(2) << "\n";
    }
  }
  if (options.swarm) return outcomes[Outcome::kSafety] == 0 ? 0 : 1;
  return bad == 0 ? 0 : 1;
}

namespace {

// `pstwin node --launched`: the launcher keeps this node's stdin open while it wants the node. Its end
// (the launcher stopped the job or died, or the ssh connection dropped) stops the node as SIGTERM
// does, so it still reports what it completed. The reading thread keeps SIGINT and SIGTERM blocked:
// they are the node's to take (realnet/stop_signals.hpp).
void stop_when_stdin_ends() {
  std::thread([] {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    char buffer[256];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      break;
    }
    ::kill(::getpid(), SIGTERM);
  }).detach();
}

}  // namespace

int run_node(const CommonOptions& common, const NodeOptions& node_options) {
  auto environment = realnet::process_environment();
  std::optional<realnet::LaunchMessage> launched;
  if (node_options.launched) {
    launched = realnet::read_launch_message(std::cin);
    for (const auto& [name, value] : launched->env) environment[name] = value;
    stop_when_stdin_ends();
  }
  // Names first: a misspelled variable explains a "required variable is not set" that follows.
  for (const auto& warning : realnet::check_env_names(environment))
    if (!common.quiet) std::cerr << "pstwin node: warning: " << warning << "\n";
  realnet::NodeEnv env = realnet::parse_node_env(realnet::node_variables(environment));
  realnet::resolve_node_address(env);
  auto overrides = env.scenario_overrides();
  for (const auto& text : common.sets) overrides.push_back(split_override(text));
  const Scenario scenario =
      launched ? parse_scenario(launched->scenario, "the scenario from pstwin launch", overrides)
               : load_scenario(common.scenario_path, overrides);
  realnet::NodeRunOptions options;
  if (common.quiet) options.log = [](std::string_view) {};
  try {
    const auto result = realnet::run_node(scenario, env, options);
    if (!node_options.report_path.empty()) {
      std::filesystem::path path(node_options.report_path);
      // A directory (DIR/): one file per node in it, named by role and rank, for launchers that give
      // every process the same arguments (mpirun, srun).
      if (node_options.report_path.ends_with('/') || std::filesystem::is_directory(path))
        path /= realnet::part_file_name(result.part, ::getpid());
      if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
      // Written whole under a temporary name, then renamed: a reader never sees half a report.
      const std::string temporary = path.string() + ".tmp";
      std::ofstream(temporary) << realnet::part_to_json(result.part).dump(2) << "\n";
      std::filesystem::rename(temporary, path);
    }
    if (launched) std::cout << realnet::framed_report(result.part) << std::flush;
    std::cerr << result.details;
    // -q: the summary line only when something went wrong (on stderr, with the details above).
    if (!common.quiet)
      std::cout << result.summary << std::endl;
    else if (result.exit_code != 0)
      std::cerr << result.summary << std::endl;
    return result.exit_code;
  } catch (const realnet::BindError& e) {
    std::cerr << "pstwin: " << e.what()
              << (env.role == Role::kScheduler
                      ? "; is another scheduler running? choose another DMLC_PS_ROOT_PORT"
                  : env.node_port > 0
                      ? "; is another node using DMLC_NODE_PORT=" + std::to_string(env.node_port) +
                            "? choose another, or unset it for a free port"
                      : "; DMLC_NODE_HOST must be an address of this machine")
              << "\n";
    return 2;
  }
}

namespace {

// A scenario that requires encryption launched without it: refused before anything starts, rather
// than by every node.
bool encryption_as_required(const Scenario& scenario, bool encrypt) {
  if (encrypt || !scenario.ps.require_encryption) return true;
  std::cerr << "pstwin: ps.require_encryption = true and this job would run unencrypted: add --encrypt curve "
               "(the zmq van), or set ps.require_encryption = false\n";
  return false;
}

// --encrypt curve with a van that cannot encrypt: said once here rather than by every node.
bool encryption_possible(bool encrypt, realnet::Van van) {
  const auto why = realnet::encryption_unavailable(van);
  if (!encrypt || why.empty()) return true;
  std::cerr << "pstwin: --encrypt curve with --van " << realnet::van_name(van) << ": " << why << "\n";
  return false;
}

// `pstwin run -- COMMAND`: every node's output, prefixed with its name as `[worker0] `, then the outcome.
int print_command_job(const CommonOptions& common, const RunReport& report, const std::string& parts_dir) {
  std::vector<std::filesystem::path> logs;
  for (const auto& entry : std::filesystem::directory_iterator(parts_dir))
    if (entry.path().extension() == ".log") logs.push_back(entry.path());
  std::ranges::sort(logs);
  for (const auto& log : logs) {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);)
      std::cout << "[" << log.stem().string() << "] " << line << "\n";
  }
  if (!report.completed)
    std::cerr << "pstwin run: the job failed: " << report.failure << "\n";
  else if (!common.quiet)
    std::cout << "pstwin run: every node ended with status 0 (logs: " << parts_dir << ")\n";
  return report.completed ? 0 : 1;
}

// ps.local_reduce = "nccl" with every node on this machine: NCCL refuses two ranks of one communicator on
// one GPU (ncclCommInitRank: "Duplicate GPU detected"), and worker r uses GPU r mod `devices`. Said here,
// before any process starts, naming the workers; "" when every host's workers have GPUs of their own.
std::string nccl_shared_gpu(const Scenario& scenario, int devices) {
  if (scenario.ps.local_reduce != LocalReduce::kNccl || devices <= 0) return "";
  const HostGroups groups(scenario);
  for (const int root : groups.roots()) {
    std::map<int, int> by_gpu;  // GPU -> the first worker of this host on it
    for (const int worker : groups.members(root)) {
      const auto [first, fresh] = by_gpu.emplace(worker % devices, worker);
      if (fresh) continue;
      return "ps.local_reduce = \"nccl\": workers " + std::to_string(first->second) + " and " +
             std::to_string(worker) + " of host " + scenario.worker_host_name(root) +
             " would share cuda:" + std::to_string(first->first) + " (worker r uses GPU r mod " +
             std::to_string(devices) +
             ", the CUDA devices visible here), and NCCL needs a GPU of its own for each worker of a host; "
             "place at most " +
             std::to_string(devices) +
             " workers on a host (roles.worker_hosts) or set "
             "ps.local_reduce = \"none\"";
    }
  }
  return "";
}

}  // namespace

int run_job(const CommonOptions& common, const RunOptions& options) {
  Scenario scenario = load(common);
  if (options.seed) scenario.seed = *options.seed;
  if (scenario.workload.device == DeviceKind::kCuda) {
    // Said once here rather than by every worker process (each would fail the same way).
    const auto available = cuda::availability();
    if (available.devices == 0) {
      std::cerr << "pstwin: workload.device = \"cuda\": no CUDA device: " << available.why
                << " (the simulator needs none: pstwin sim)\n";
      return 2;
    }
    if (const auto shared = nccl_shared_gpu(scenario, available.devices); !shared.empty()) {
      std::cerr << "pstwin: " << shared << "\n";
      return 2;
    }
  }
  const std::string out_dir = out_dir_of(scenario, options.out_dir);
  realnet::JobRunOptions job;
  job.scenario_path = std::filesystem::absolute(common.scenario_path).string();
  job.sets = common.sets;
  job.seed = options.seed;
  job.parts_dir = out_dir + "/parts";
  job.netns = options.netns;
  job.kernel_partitions = options.kernel_partitions;
  job.encrypt = options.encrypt == "curve";
  job.van = options.van.empty() ? realnet::default_van(job.encrypt)
                                : realnet::parse_van(options.van).value_or(realnet::default_van());
  if (const auto missing = realnet::van_unavailable(job.van); !missing.empty()) {
    std::cerr << "pstwin: --van " << options.van << ": " << missing << "\n";
    return 2;
  }
  if (!encryption_as_required(scenario, job.encrypt) || !encryption_possible(job.encrypt, job.van)) return 2;
  if (!common.quiet) job.log = [](const std::string& line) { std::cerr << "[pstwin] " << line << "\n"; };
  job.command = options.command;
  RunReport report;
  try {
    report = realnet::run_job(scenario, job);
  } catch (const realnet::NetnsError& e) {
    std::cerr << "pstwin: " << e.what() << "\n";  // this machine cannot make the cluster: bad input
    return 2;
  }
  if (!job.command.empty()) return print_command_job(common, report, job.parts_dir);
  return finish_run(common, report, scenario, out_dir, ", parts/");
}

int run_launch(const CommonOptions& common, const LaunchOptions& options) {
  Scenario scenario = load(common);
  if (options.seed) scenario.seed = *options.seed;
  std::ifstream in(options.hostfile);
  std::ostringstream hostfile;
  hostfile << in.rdbuf();
  realnet::JobLaunchOptions launch;
  launch.hosts = realnet::parse_hostfile(hostfile.str(), options.hostfile);
  launch.rsh = options.rsh;
  launch.remote_binary = options.remote_pstwin;
  launch.port = options.port;
  launch.encrypt = options.encrypt == "curve";
  launch.van = options.van.empty() ? realnet::default_van(launch.encrypt)
                                   : realnet::parse_van(options.van).value_or(realnet::default_van());
  if (!encryption_as_required(scenario, launch.encrypt) || !encryption_possible(launch.encrypt, launch.van))
    return 2;
  // Checked before anything starts: a bad --rsh or binary path is bad input, not a failed job.
  realnet::remote_command(launch, launch.hosts.front());
  const std::string out_dir = out_dir_of(scenario, options.out_dir);
  launch.parts_dir = out_dir + "/parts";
  if (!common.quiet) launch.log = [](const std::string& line) { std::cerr << "[pstwin] " << line << "\n"; };
  const RunReport report = realnet::launch_job(scenario, launch);
  return finish_run(common, report, scenario, out_dir, ", parts/");
}

int run_merge(const MergeOptions& options) {
  if (const auto kind = shard_kind(options.parts_dir)) {
    if (!options.scenario_path.empty())
      throw ScenarioError("--scenario: not for shards, which name their scenario; leave it out");
    const std::string out_dir = options.out_dir.empty() ? options.parts_dir : options.out_dir;
    prepare_out_dir(out_dir, !options.out_dir.empty());
    if (*kind == ShardKind::kExplore) {
      merge_explore_shards(options.parts_dir, out_dir);
      if (!options.quiet) std::cout << "merged explore shards: " << out_dir << "/explore.json\n";
      return 0;
    }
    merge_sweep_shards(options.parts_dir, out_dir);
    if (!options.quiet) std::cout << "merged sweep shards: " << out_dir << "/sweep.csv, sweep.json\n";
    return draw_sweep_plots(out_dir, options.quiet) ? 0 : 1;
  }
  const auto job = realnet::read_job_parts(options.parts_dir);
  std::vector<realnet::NodePart> parts;
  for (const auto& p : job) parts.push_back(p.part);
  Scenario scenario;
  if (!options.scenario_path.empty()) {
    std::vector<std::pair<std::string, std::string>> overrides;
    for (const auto& text : options.sets) overrides.push_back(split_override(text));
    scenario = load_scenario(options.scenario_path, overrides);
  } else if (job.front().part.scenario.empty()) {
    throw ScenarioError(job.front().file.string() +
                        ": names no scenario (written by an older pstwin node); pass --scenario FILE, the "
                        "scenario the job ran (with --set for what its DMLC_* variables changed)");
  } else {
    scenario = parse_scenario(job.front().part.scenario, job.front().file.string() + " (its scenario)");
  }
  std::string failure;
  if (const auto missing = realnet::missing_nodes(scenario, parts); !missing.empty()) {
    std::string names;
    for (const auto& name : missing) names += (names.empty() ? "" : ", ") + name;
    // A warning and the report's failure: without a server's report its keys are missing from the
    // model digest; without a worker's its iterations.
    std::cerr << "pstwin merge: warning: no report from " << names << " in " << options.parts_dir
              << " (start each node with --report); merged without them\n";
    failure = "no report from " + names;
  }
  RunReport report = realnet::merge_parts(scenario, parts, failure);
  const std::string out_dir = options.out_dir.empty() ? options.parts_dir : options.out_dir;
  prepare_out_dir(out_dir, !options.out_dir.empty());
  if (!options.quiet) std::cout << "pstwin merge: " << parts.size() << " node reports merged\n";
  CommonOptions common;
  common.quiet = options.quiet;
  return finish_run(common, report, scenario, out_dir, "");
}

int run_compare(const CompareOptions& options) {
  RunReport sim;
  RunReport real;
  try {
    sim = load_results(options.sim_dir);
    real = load_results(options.real_dir);
  } catch (const std::runtime_error& e) {
    std::cerr << "pstwin compare: " << e.what() << "\n";
    return 2;
  }
  const Comparison comparison = compare_reports(sim, real);
  std::cout << comparison_text(comparison);
  if (options.tolerance <= 0) return 0;
  const auto error = comparison.mean_iteration.relative_error();
  if (error && std::abs(*error) <= options.tolerance) return 0;
  std::cout << "mean iteration time " << (error ? "differs by more than " : "cannot be compared within ")
            << options.tolerance * 100 << " %\n";
  return 1;
}

}  // namespace pstwin::cli
