// `pstwin calibrate`: the van's CPU cost per message and per byte, measured on loopback and fitted
// so that the simulator's [cpu] fields reproduce the real iteration times (docs/FIDELITY.md).
//
// Each job (a size, blocking or pipelined) runs for real (1 server, 2 workers: the smallest job whose
// server aggregates, with its nodes on this machine's cores; as `pstwin run` runs it, a process per
// node, or with --nodes in-process as realnet::run_local does),
// then in the simulator with costs nudged one at a time: the differences are how much of each cost
// lies on the job's critical path, so the real times are fitted by least squares over the jobs,
// relative errors weighed alike (fit_costs). The fitted fields are simulated once more to say how
// well they fit.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "realnet/job_run.hpp"
#include "realnet/local_run.hpp"
#include "scenario/units.hpp"
#include "sim/simulation.hpp"

namespace pstwin::cli {
namespace {

using Overrides = std::vector<std::pair<std::string, std::string>>;

// The unit costs the critical path is measured with: large enough to stand out of the simulator's
// own times, small enough that the CPU stays the bottleneck it is on loopback.
constexpr double kUnitMessageS = 10e-6;
constexpr double kUnitByteS = 1e-9;  // "1GBps"

// A pipelined job's partitions per iteration: 4 MB of them, from 2 to this many.
constexpr std::uint64_t kMaxValues = 256;

struct Job {
  std::uint64_t size = 0;
  int values = 1;  // partitions per iteration: 1 is blocking (push, pull, wait), more are pipelined
  int iterations = 0;
  std::string label() const {
    std::string text = units::format_size(size);
    if (text.size() > 2 && text.front() == '"') text = text.substr(1, text.size() - 2);  // TOML quotes
    return text + (values == 1 ? " blocking" : " pipelined x" + std::to_string(values));
  }
};

std::vector<Job> plan_jobs(const std::vector<std::uint64_t>& sizes, bool quick) {
  std::vector<Job> jobs;
  const std::uint64_t budget = quick ? (8u << 20) : (256u << 20);  // bytes pushed per job
  for (const auto size : sizes) {
    const auto iterations = [&](int values) {
      return static_cast<int>(std::clamp<std::uint64_t>(budget / (size * static_cast<std::uint64_t>(values)),
                                                        quick ? 10 : 20, 400));
    };
    jobs.push_back({size, 1, iterations(1)});
    const int values = static_cast<int>(std::clamp<std::uint64_t>((4u << 20) / size, 2, kMaxValues));
    jobs.push_back({size, values, iterations(values)});
  }
  return jobs;
}

// One server, two workers on hosts whose links are far faster than loopback: what the simulator has
// left to model is the CPU. Real payloads, no checks, no trace: they would read every byte.
std::string job_toml(const Job& job) {
  std::ostringstream toml;
  toml << "name = \"calibrate\"\n"
       << "[cluster]\nhost_bandwidth = \"1000GBps\"\nhost_latency = \"1us\"\n"
       << "[roles]\nservers = 1\nworkers = 2\n"
       << "[ps]\nmode = \"sync\"\npartition_bytes = " << job.size
       << "\n"
       // The default scheduling credit, as a training job streams its partitions: nodes then sleep
       // and wake within a stream as they do in the jobs the fragment is for.
       << "[workload]\ntensor_bytes = [" << job.size * static_cast<std::uint64_t>(job.values)
       << "]\ncompute = \"0s\"\niterations = " << job.iterations << "\npayload = \"real\"\n"
       << "[staging]\nenabled = false\n"
       << "[invariants]\naggregates = false\nupdates = false\nsync_identical = false\n"
       << "[output]\ntrace = false\n";
  return toml.str();
}

Scenario job_scenario(const Job& job, const Overrides& costs) {
  return parse_scenario(job_toml(job), "pstwin calibrate", costs);
}

// A folder of this process's own under the temporary directory, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "pstwin-calibrate-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("pstwin calibrate: cannot make a folder under " +
                               std::filesystem::temp_directory_path().string() + " for the jobs' scenarios");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The median iteration time after the first tenth (connections warming, allocator growing).
double steady_median(const RunReport& report, const std::string& what) {
  if (!report.completed) throw std::runtime_error(what + " failed: " + report.failure);
  std::vector<double> times;
  for (const auto& it : report.iterations) times.push_back(it.time_s);
  if (times.empty()) throw std::runtime_error(what + " recorded no iteration");
  times.erase(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 10));
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

// The fitted model: per message, per byte within a core's cache and past it, and the wake-up of an
// idle van (docs/FIDELITY.md). The send and receive sides get the same values: loopback times cannot
// tell them apart.
struct Costs {
  double per_message_s = 0;
  double byte_s = 0;               // per byte of a message's first cache_bytes
  double beyond_cache_byte_s = 0;  // per byte past them
  std::uint64_t cache_bytes = 0;   // 0: every byte at byte_s
  double wakeup_s = 0;
};

unsigned machine_cpus() {
  return std::clamp(std::thread::hardware_concurrency(), 1u, 4096u);
}

Overrides cost_overrides(const Costs& costs) {
  const auto rate = [](double byte_s) {
    return units::format_real(units::Quantity::kBandwidth, byte_s > 0 ? 1 / byte_s : 0);
  };
  const std::string message = units::format_real(units::Quantity::kDuration, costs.per_message_s);
  Overrides overrides{{"cpu.send_per_message", message},
                      {"cpu.receive_per_message", message},
                      {"cpu.send_bandwidth", rate(costs.byte_s)},
                      {"cpu.receive_bandwidth", rate(costs.byte_s)}};
  if (costs.cache_bytes > 0 && costs.beyond_cache_byte_s > 0) {
    overrides.emplace_back("cpu.cache_bytes", std::to_string(costs.cache_bytes));
    overrides.emplace_back("cpu.send_bandwidth_beyond_cache", rate(costs.beyond_cache_byte_s));
    overrides.emplace_back("cpu.receive_bandwidth_beyond_cache", rate(costs.beyond_cache_byte_s));
  }
  overrides.emplace_back("cpu.wakeup", units::format_real(units::Quantity::kDuration, costs.wakeup_s));
  // The real jobs' nodes share this machine's cores, and so do the simulated ones' costs.
  if (costs.per_message_s > 0 || costs.byte_s > 0 || costs.beyond_cache_byte_s > 0 || costs.wakeup_s > 0) {
    overrides.emplace_back("cpu.shared_cores", std::to_string(machine_cpus()));
    overrides.emplace_back("cpu.core_scope", "machine");
  }
  return overrides;
}

std::vector<double> simulate(const std::vector<Job>& jobs, const Overrides& costs) {
  std::vector<Scenario> scenarios;
  for (const auto& job : jobs) scenarios.push_back(job_scenario(job, costs));
  const auto reports = sim::run_isolated(scenarios, 2);
  std::vector<double> times;
  for (std::size_t i = 0; i < jobs.size(); ++i)
    times.push_back(steady_median(reports[i], "the simulation of " + jobs[i].label()));
  return times;
}

double rms_error(const std::vector<double>& real, const std::vector<double>& simulated) {
  double squares = 0;
  for (std::size_t i = 0; i < real.size(); ++i) squares += std::pow((simulated[i] - real[i]) / real[i], 2);
  return std::sqrt(squares / static_cast<double>(real.size()));
}

// Least squares of target = columns * x with x >= 0, each row divided by its weight: every subset of
// the columns is solved and the best solution with no negative coefficient kept (four columns: 15
// subsets). A column of zeros stays at 0.
std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& columns,
                                              const std::vector<double>& target,
                                              const std::vector<double>& weight) {
  const std::size_t n = columns.size(), rows = target.size();
  std::vector<double> best(n, 0);
  double best_error = 0;
  for (std::size_t i = 0; i < rows; ++i) best_error += std::pow(target[i] / weight[i], 2);
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::vector<std::size_t> used;
    for (std::size_t k = 0; k < n; ++k)
      if ((mask >> k) & 1u) used.push_back(k);
    const std::size_t m = used.size();
    // Normal equations, solved by Gaussian elimination with partial pivoting.
    std::vector<std::vector<double>> a(m, std::vector<double>(m + 1, 0));
    for (std::size_t i = 0; i < rows; ++i) {
      const double w = 1 / (weight[i] * weight[i]);
      for (std::size_t r = 0; r < m; ++r) {
        for (std::size_t c = 0; c < m; ++c) a[r][c] += columns[used[r]][i] * columns[used[c]][i] * w;
        a[r][m] += columns[used[r]][i] * target[i] * w;
      }
    }
    bool singular = false;
    for (std::size_t c = 0; c < m && !singular; ++c) {
      std::size_t pivot = c;
      for (std::size_t r = c + 1; r < m; ++r)
        if (std::abs(a[r][c]) > std::abs(a[pivot][c])) pivot = r;
      if (std::abs(a[pivot][c]) < 1e-300) {
        singular = true;
        break;
      }
      std::swap(a[c], a[pivot]);
      for (std::size_t r = 0; r < m; ++r) {
        if (r == c) continue;
        const double f = a[r][c] / a[c][c];
        for (std::size_t k = c; k <= m; ++k) a[r][k] -= f * a[c][k];
      }
    }
    if (singular) continue;
    std::vector<double> x(n, 0);
    bool negative = false;
    for (std::size_t r = 0; r < m; ++r) {
      x[used[r]] = a[r][m] / a[r][r];
      negative = negative || x[used[r]] < 0;
    }
    if (negative) continue;
    double error = 0;
    for (std::size_t i = 0; i < rows; ++i) {
      double fitted = 0;
      for (std::size_t k = 0; k < n; ++k) fitted += columns[k][i] * x[k];
      error += std::pow((target[i] - fitted) / weight[i], 2);
    }
    if (error < best_error) {
      best_error = error;
      best = x;
    }
  }
  return best;
}

// Gauss-Newton on the relative errors: around the current costs, each parameter's effect on every
// job's simulated time is measured by nudging it, and the real times are fitted as the part no
// parameter explains plus those effects (from zero costs, as `without + x * per-message + ...`). The
// effect of a byte is split at each candidate cache size by the job's message size (one size per
// job), so the cache size is chosen by the same fit. A few rounds, keeping the costs whose own
// simulation fits best: the wake-up's effect depends on how busy the other costs keep the nodes.
Costs fit_costs(const std::vector<Job>& jobs, const std::vector<double>& real) {
  constexpr int kRounds = 4;
  std::vector<std::uint64_t> candidates{0};
  const std::uint64_t largest = std::max_element(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
                                  return a.size < b.size;
                                })->size;
  for (std::uint64_t c = 64u << 10; c < largest; c *= 2) candidates.push_back(c);

  Costs current, best;
  double best_error = -1;
  for (int round = 0; round < kRounds; ++round) {
    const auto at = simulate(jobs, cost_overrides(current));
    if (const double error = rms_error(real, at); round > 0 && (best_error < 0 || error < best_error)) {
      best_error = error;
      best = current;
    }
    if (round == kRounds - 1) break;
    // A quarter of the current value (a unit from zero): small enough to stay near the fit, large
    // enough to move the simulated times beyond their rounding.
    const auto step_from = [](double value, double unit) { return value > 0 ? value / 4 : unit; };
    const auto nudged = [&](auto&& change, double step) {
      Costs costs = current;
      change(costs, step);
      const auto times = simulate(jobs, cost_overrides(costs));
      std::vector<double> effect;
      for (std::size_t i = 0; i < jobs.size(); ++i) effect.push_back((times[i] - at[i]) / step);
      return effect;
    };
    const auto per_message = nudged([](Costs& c, double d) { c.per_message_s += d; },
                                    step_from(current.per_message_s, kUnitMessageS));
    const auto per_byte = nudged(
        [](Costs& c, double d) {
          c.byte_s += d;
          if (c.cache_bytes > 0) c.beyond_cache_byte_s += d;
        },
        step_from(current.byte_s, kUnitByteS));
    const auto wakeup =
        nudged([](Costs& c, double d) { c.wakeup_s += d; }, step_from(current.wakeup_s, kUnitMessageS));

    const auto share = [](const Job& job, std::uint64_t cache) {  // of a message's bytes within the cache
      return cache == 0 ? 1.0
                        : static_cast<double>(std::min(job.size, cache)) / static_cast<double>(job.size);
    };
    double round_best = -1;
    Costs next = current;
    for (const auto cache : candidates) {
      std::vector<double> beyond, target;
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        const double now_share = share(jobs[i], current.cache_bytes);
        const double byte_now =
            per_byte[i] *
            (current.byte_s * now_share +
             (current.cache_bytes > 0 ? current.beyond_cache_byte_s : current.byte_s) * (1 - now_share));
        const double unexplained =
            at[i] - per_message[i] * current.per_message_s - byte_now - wakeup[i] * current.wakeup_s;
        beyond.push_back(per_byte[i] * (1 - share(jobs[i], cache)));
        target.push_back(real[i] - unexplained);
      }
      // Bytes past the cache cost at least what bytes within it do: the second coefficient is the
      // difference, so a fit that would make memory faster than the cache keeps one rate instead.
      const auto x = nonnegative_least_squares({per_message, per_byte, beyond, wakeup}, target, real);
      // A split whose bytes within the cache cost nothing says only that the jobs' bytes cost more
      // in large messages: not a cache. The candidate without a split (0) stands for it.
      if (cache > 0 && x[2] > 0 && x[1] <= 0) continue;
      double error = 0;
      for (std::size_t i = 0; i < jobs.size(); ++i) {
        const double fitted =
            per_message[i] * x[0] + per_byte[i] * x[1] + beyond[i] * x[2] + wakeup[i] * x[3];
        error += std::pow((target[i] - fitted) / real[i], 2);
      }
      if (round_best < 0 || error < round_best) {
        round_best = error;
        const bool split = cache > 0 && x[2] > 0;
        next = Costs{x[0], x[1], split ? x[1] + x[2] : 0, split ? cache : 0, x[3]};
      }
    }
    current = next;
  }
  return best;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace

int run_calibrate(const CalibrateOptions& options) {
  const auto van = realnet::parse_van(options.van).value_or(realnet::default_van());  // the parser checked it
  if (const auto missing = realnet::van_unavailable(van); !missing.empty()) {
    std::cerr << "pstwin: --van " << options.van << ": " << missing << "\n";
    return 2;
  }
  std::vector<std::uint64_t> sizes;
  std::stringstream list(options.sizes);
  for (std::string item; std::getline(list, item, ',');) {
    const auto parsed = units::parse_size(item);
    if (parsed.status != units::ParseStatus::kOk || parsed.value < 1024 || parsed.value > (256u << 20))
      throw ScenarioError("--sizes: '" + item +
                          "' is not a size from 1KB to 256MB (e.g. --sizes 4KB,1MB,16MB)");
    sizes.push_back(parsed.value);
  }
  if (sizes.size() < 2) throw ScenarioError("--sizes: give at least two sizes, e.g. --sizes 4KB,16MB");
  const auto jobs = plan_jobs(sizes, options.quick);
  const std::string machine = std::to_string(std::thread::hardware_concurrency()) + " CPUs, load average " +
                              load_average() + " before, host " + host_name();
  const auto say = [&](const std::string& line) {
    if (!options.quiet) std::cerr << "[pstwin] " << line << "\n";
  };

  realnet::LocalRunOptions local;
  local.van = van;
  local.log = [](std::string_view) {};  // the nodes' lines would bury the table
  const bool processes = options.nodes == "processes";
  std::optional<ScratchDir> scratch;
  if (processes) scratch.emplace();
  // Each job's scenario, parsed once and, for node processes, written once for them to read.
  std::vector<Scenario> scenarios;
  std::vector<std::string> scenario_paths;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    scenarios.push_back(job_scenario(jobs[i], {}));
    if (!processes) continue;
    scenario_paths.push_back((scratch->path() / ("job" + std::to_string(i) + ".toml")).string());
    std::ofstream file(scenario_paths.back());
    file << job_toml(jobs[i]);
    file.close();
    if (!file)
      throw std::runtime_error("pstwin calibrate: cannot write the job's scenario " + scenario_paths.back());
  }
  // Each job `rounds` times, every job once per round (so a slow minute of the machine spreads over
  // the jobs instead of landing on one), and the median of its rounds kept.
  std::vector<std::vector<double>> rounds(jobs.size());
  for (int round = 0; round < options.rounds; ++round) {
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      RunReport report;
      if (processes) {
        realnet::JobRunOptions run;
        run.scenario_path = scenario_paths[i];
        run.parts_dir =
            (scratch->path() / ("parts" + std::to_string(i) + "-" + std::to_string(round))).string();
        run.van = van;
        run.on_interrupt = [&scratch] { scratch.reset(); };
        report = realnet::run_job(scenarios[i], run);
      } else {
        report = realnet::run_local(scenarios[i], local);
      }
      rounds[i].push_back(steady_median(report, "the real " + jobs[i].label() + " job"));
      say(jobs[i].label() + ": " + std::to_string(rounds[i].back() * 1e6) +
          " us per iteration (real, round " + std::to_string(round + 1) + ")");
    }
  }
  scratch.reset();  // the jobs are done: an interrupted fit leaves nothing behind
  std::vector<double> real;
  for (auto& times : rounds) {
    std::sort(times.begin(), times.end());
    real.push_back(times[times.size() / 2]);
  }
  const auto base = simulate(jobs, {});
  const Costs fit = fit_costs(jobs, real);
  const Overrides fitted = cost_overrides(fit);
  const auto check = simulate(jobs, fitted);

  std::ostringstream table;
  double worst = 0, squares = 0;
  table << "| job | real | sim, no CPU cost | sim, fitted | error |\n|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const double error = (check[i] - real[i]) / real[i];
    worst = std::max(worst, std::abs(error));
    squares += error * error;
    char row[160];
    std::snprintf(row, sizeof row, "| %s | %.1f us | %.1f us | %.1f us | %+.1f %% |\n",
                  jobs[i].label().c_str(), real[i] * 1e6, base[i] * 1e6, check[i] * 1e6, error * 100);
    table << row;
  }
  char summary[200];
  std::snprintf(summary, sizeof summary, "fit over %zu jobs: rms error %.1f %%, worst %.1f %%", jobs.size(),
                std::sqrt(squares / static_cast<double>(jobs.size())) * 100, worst * 100);

  std::ostringstream fragment;
  fragment << "# pstwin calibrate --van " << realnet::van_name(van) << ", " << utc_now() << "\n"
           << "# machine: " << machine << "\n"
           << "# " << summary << " (1 server, 2 workers on loopback, " << options.rounds
           << (options.rounds == 1 ? " round, " : " rounds, ")
           << (processes ? "a process per node" : "in-process nodes") << "; sizes " << options.sizes << ")\n"
           << "# the send and receive sides are assumed equal: loopback times cannot tell them apart\n"
           << "# per message, per byte within cache_bytes and past them, and the wake-up of an idle van\n"
           << "[cpu]\n";
  for (const auto& [path, value] : fitted)
    if (path != "cpu.shared_cores" && path != "cpu.core_scope")  // the fit's own machine, written below
      fragment << path.substr(path.find('.') + 1) << " = " << value << "\n";
  // Where nodes share this machine's CPUs (placed on one host, or a loopback or namespace cluster with
  // core_scope = "machine"), their costs wait for a free one; elsewhere the field changes nothing.
  const unsigned cpus = machine_cpus();
  fragment << "# this machine's CPUs, shared by the nodes of one host (core_scope = \"machine\": of every "
              "host)\n"
           << "shared_cores = " << cpus << "\n";

  if (!options.quiet) std::cerr << table.str() << summary << "\n";
  if (options.out.empty()) {
    std::cout << fragment.str();
    return 0;
  }
  std::ofstream out(options.out);
  out << fragment.str();
  out.close();
  if (!out) throw std::runtime_error("--out " + options.out + ": cannot write the fragment there");
  if (!options.quiet)
    std::cout << "wrote " << options.out
              << ": add it to a scenario with `cat`, or pass each field with --set\n";
  return 0;
}

}  // namespace pstwin::cli
