// pstwin-simapp: runs an unchanged ps-lite application in the simulator (app_simulation.hpp).
//   pstwin-simapp SCENARIO MODULE [ARG...] [--set FIELD=VALUE]... [--seed N] [--out DIR] [--role-arg]
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "report/run_report.hpp"
#include "scenario/scenario.hpp"
#include "simapp/app_simulation.hpp"

namespace {

std::string replay_line;  // printed when the application aborts (a failed CHECK)

void on_abort(int /*signal*/) {
  // Only async-signal-safe calls here.
  const char text[] = "pstwin-simapp: a simulated process aborted; replay: ";
  (void)!write(STDERR_FILENO, text, sizeof text - 1);
  (void)!write(STDERR_FILENO, replay_line.data(), replay_line.size());
  (void)!write(STDERR_FILENO, "\n", 1);
}

std::string quoted_command(int argc, char** argv) {
  std::string command = "pstwin-simapp";
  for (int i = 1; i < argc; ++i) command += " " + pstwin::shell_quote(argv[i]);
  return command;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pstwin-simapp: runs a ps-lite application, unchanged, inside the simulator (docs/API.md)"};
  std::string scenario_path;
  pstwin::simapp::AppOptions options;
  std::vector<std::string> sets;
  std::optional<std::uint64_t> seed;
  std::string out_dir;
  app.add_option("SCENARIO", scenario_path, "scenario file: the job's roles, platform and network")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("MODULE", options.module,
                 "the application built as a shared module (add_library(NAME MODULE))")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("ARGS", options.args, "arguments of every process's main (after --)");
  app.add_option("--set", sets, "override a scenario field, e.g. --set roles.workers=4")->take_all();
  app.add_option("--seed", seed, "seed for every random choice (default: the scenario's)");
  app.add_option("--out", out_dir, "output directory (default: pstwin-out/<scenario name>)");
  app.add_flag("--role-arg", options.role_argument,
               "pass each process its role as argv[1] (scheduler, server, worker), as ps-lite's "
               "tests/local_multi_workers.sh does");
  CLI11_PARSE(app, argc, argv);

  pstwin::Scenario scenario;
  try {
    std::vector<std::pair<std::string, std::string>> overrides;
    for (const auto& set : sets) {
      const auto eq = set.find('=');
      if (eq == std::string::npos || eq == 0)
        throw pstwin::ScenarioError("--set " + set + ": expected FIELD=VALUE, e.g. --set roles.workers=4");
      overrides.emplace_back(set.substr(0, eq), set.substr(eq + 1));
    }
    scenario = pstwin::load_scenario(scenario_path, overrides);
  } catch (const std::exception& error) {
    std::cerr << "pstwin-simapp: " << error.what() << "\n";
    return 2;
  }
  if (seed) scenario.seed = *seed;
  if (out_dir.empty()) out_dir = "pstwin-out/" + scenario.name;
  options.replay = quoted_command(argc, argv);
  replay_line = options.replay;
  std::signal(SIGABRT, on_abort);

  const auto publish = [&](const pstwin::simapp::AppRun& run) {
    for (const auto& process : run.processes)
      std::cout << "pstwin-simapp: " << process.label << ": "
                << (process.returned ? "main returned " + std::to_string(process.status)
                                     : "main did not return")
                << "\n";
    std::error_code error;
    std::filesystem::create_directories(out_dir, error);
    pstwin::write_outputs(run.report, scenario, out_dir);
    std::cout << pstwin::summary_text(run.report, out_dir + "/results.json");
    if (!run.ok()) std::cout << "replay: " << options.replay << "\n";
    std::cout << std::flush;
  };
  try {
    const auto run = pstwin::simapp::run_app_simulation(scenario, options, publish);
    return run.ok() ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << "pstwin-simapp: " << error.what() << "\n";
    return 2;
  }
}
