// `pstwin calibrate`: the van's CPU cost per message and per byte, measured on loopback and fitted
// so that the simulator's [cpu] fields reproduce the real iteration times (docs/FIDELITY.md).
//
// Each job (a size, blocking or pipelined) runs for real (realnet::run_local, 1 server, 1 worker),
// then in the simulator three times: without CPU costs, with a unit per-message cost and with a unit
// per-byte cost. The differences are how much of each cost lies on the job's critical path, so the
// real time is fitted as `without + x * per-message + y * per-byte` by least squares over the jobs,
// relative errors weighed alike. The fitted fields are simulated once more to say how well they fit.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
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
    const int values = static_cast<int>(std::clamp<std::uint64_t>((4u << 20) / size, 2, 64));
    jobs.push_back({size, values, iterations(values)});
  }
  return jobs;
}

// One server, one worker on hosts whose links are far faster than loopback: what the simulator has
// left to model is the CPU. Real payloads, no checks, no trace: they would read every byte.
Scenario job_scenario(const Job& job, const Overrides& costs) {
  std::ostringstream toml;
  toml << "name = \"calibrate\"\n"
       << "[cluster]\nhost_bandwidth = \"1000GBps\"\nhost_latency = \"1us\"\n"
       << "[roles]\nservers = 1\nworkers = 1\n"
       << "[ps]\nmode = \"sync\"\npartition_bytes = " << job.size << "\n"
       << "[workload]\ntensor_bytes = [" << job.size * static_cast<std::uint64_t>(job.values)
       << "]\ncompute = \"0s\"\niterations = " << job.iterations << "\npayload = \"real\"\n"
       << "[staging]\nenabled = false\n"
       << "[invariants]\naggregates = false\nupdates = false\nsync_identical = false\n"
       << "[output]\ntrace = false\n";
  return parse_scenario(toml.str(), "pstwin calibrate", costs);
}

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

Overrides cost_overrides(double per_message_s, double byte_s) {
  const std::string message = units::format_real(units::Quantity::kDuration, per_message_s);
  const std::string rate = units::format_real(units::Quantity::kBandwidth, byte_s > 0 ? 1 / byte_s : 0);
  return {{"cpu.send_per_message", message},
          {"cpu.receive_per_message", message},
          {"cpu.send_bandwidth", rate},
          {"cpu.receive_bandwidth", rate}};
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

struct Fit {
  double per_message_s = 0;
  double byte_s = 0;
};

// Least squares of real - base = x * message + y * byte, each row divided by the real time; a
// coefficient that comes out negative is held at 0 and the other refitted.
Fit fit_costs(const std::vector<double>& real, const std::vector<double>& base,
              const std::vector<double>& message, const std::vector<double>& byte) {
  double mm = 0, bb = 0, mb = 0, mr = 0, br = 0;
  for (std::size_t i = 0; i < real.size(); ++i) {
    const double w = 1 / real[i];
    const double m = message[i] * w, b = byte[i] * w, r = (real[i] - base[i]) * w;
    mm += m * m;
    bb += b * b;
    mb += m * b;
    mr += m * r;
    br += b * r;
  }
  Fit fit;
  const double det = mm * bb - mb * mb;
  if (det > 0) {
    fit.per_message_s = (mr * bb - br * mb) / det;
    fit.byte_s = (br * mm - mr * mb) / det;
  }
  if (det <= 0 || fit.per_message_s < 0 || fit.byte_s < 0) {
    const Fit messages_only{mm > 0 ? std::max(0.0, mr / mm) : 0, 0};
    const Fit bytes_only{0, bb > 0 ? std::max(0.0, br / bb) : 0};
    const auto error = [&](const Fit& f) {
      double sum = 0;
      for (std::size_t i = 0; i < real.size(); ++i) {
        const double e = (real[i] - base[i] - f.per_message_s * message[i] - f.byte_s * byte[i]) / real[i];
        sum += e * e;
      }
      return sum;
    };
    fit = error(messages_only) <= error(bytes_only) ? messages_only : bytes_only;
  }
  return fit;
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
  std::vector<double> real;
  for (const auto& job : jobs) {
    const std::string what = "the real " + job.label() + " job";
    real.push_back(steady_median(realnet::run_local(job_scenario(job, {}), local), what));
    say(job.label() + ": " + std::to_string(real.back() * 1e6) + " us per iteration (real)");
  }
  const auto base = simulate(jobs, {});
  const auto with_message = simulate(jobs, cost_overrides(kUnitMessageS, 0));
  const auto with_byte = simulate(jobs, cost_overrides(0, kUnitByteS));
  std::vector<double> message, byte;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    message.push_back((with_message[i] - base[i]) / kUnitMessageS);
    byte.push_back((with_byte[i] - base[i]) / kUnitByteS);
  }
  const Fit fit = fit_costs(real, base, message, byte);
  const Overrides fitted = cost_overrides(fit.per_message_s, fit.byte_s);
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
           << "# " << summary << " (1 server, 1 worker on loopback; sizes " << options.sizes << ")\n"
           << "# the send and receive sides are assumed equal: loopback times cannot tell them apart\n"
           << "[cpu]\n";
  for (const auto& [path, value] : fitted)
    fragment << path.substr(path.find('.') + 1) << " = " << value << "\n";
  // Where nodes share this machine's CPUs (placed on one host, or a loopback or namespace cluster with
  // core_scope = "machine"), their costs wait for a free one; elsewhere the field changes nothing.
  const unsigned cpus = std::clamp(std::thread::hardware_concurrency(), 1u, 4096u);
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
