// Sim-scale bench: runs one scenario (default scenarios/scale_1024w_16s.toml: phantom payloads,
// 1024 workers, 16 servers, 100 MB model, 10 iterations) and prints wall seconds, simulated
// messages per wall second and peak memory. Usage: bench_sim_scale [SCENARIO] [--set FIELD=VALUE]...
// [--progress] (a line on stderr every 10 wall seconds: simulated time, iterations, peak RSS so far).
#include <sys/resource.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "scenario/scenario.hpp"
#include "sim/simulation.hpp"

int main(int argc, char** argv) {
  std::string path = "scenarios/scale_1024w_16s.toml";
  std::vector<std::pair<std::string, std::string>> overrides;
  pstwin::sim::SimOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--set" && i + 1 < argc) {
      const std::string set = argv[++i];
      const auto eq = set.find('=');
      if (eq == std::string::npos) {
        std::cerr << "--set " << set << ": expected FIELD=VALUE\n";
        return 2;
      }
      overrides.emplace_back(set.substr(0, eq), set.substr(eq + 1));
    } else if (arg == "--progress") {
      options.progress_interval_wall_s = 10;
      options.progress = [](const std::string& line) {
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        std::cerr << line << ", peak RSS " << usage.ru_maxrss / 1024 << " MiB" << std::endl;
      };
    } else {
      path = arg;
    }
  }
  try {
    const auto scenario = pstwin::load_scenario(path, overrides);
    const auto report = pstwin::sim::run_simulation(scenario, options);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("scenario            %s\n", scenario.name.c_str());
    std::printf("workers x servers   %d x %d, %d iterations, %s payloads\n", scenario.roles.workers,
                scenario.roles.servers, scenario.workload.iterations,
                std::string(pstwin::to_string(scenario.workload.payload)).c_str());
    std::printf("completed           %s\n", report.completed ? "yes" : ("NO: " + report.failure).c_str());
    std::printf("simulated time      %.6f s (mean iteration %.6f s)\n", report.run_time_s,
                report.mean_iteration_s());
    std::printf("messages            %llu\n", static_cast<unsigned long long>(report.messages));
    std::printf("wall                %.3f s\n", report.wall_s);
    std::printf("messages / wall s   %.0f\n", static_cast<double>(report.messages) / report.wall_s);
    std::printf("peak RSS            %.1f MiB\n", static_cast<double>(usage.ru_maxrss) / 1024.0);
    return report.ok() ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "bench_sim_scale: " << e.what() << "\n";
    return 2;
  }
}
