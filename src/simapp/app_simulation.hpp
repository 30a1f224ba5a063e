// Runs an unchanged ps-lite application inside the simulator: every node of the job (scheduler,
// servers, workers) is a simulated process whose main() is an actor, whose threads are actors
// (threads.hpp), and whose node is a SimNode of the scenario's platform; the application's blocking
// calls park its actor. Same scenario, application and seed: byte-identical results.
//
// The application is a shared module built from its unchanged sources (CMake: add_library(NAME MODULE
// ...) with pstwin's include directory, see docs/API.md); each simulated process loads its own copy,
// so a global of the application is one per process, as it would be.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "report/run_report.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::simapp {

struct AppOptions {
  std::string module;             // the application's shared module (main() exported)
  std::vector<std::string> args;  // argv[1..] of every process
  bool role_argument = false;     // argv[1] is the process's role ("scheduler", "server", "worker")
  std::string replay;             // the command line that reproduces the run
};

// What each simulated process's main returned (or why it did not), in node order.
struct ProcessOutcome {
  std::string label;  // "scheduler", "server 0", "worker 1"
  bool returned = false;
  int status = 0;
};

struct AppRun {
  RunReport report;
  std::vector<ProcessOutcome> processes;
  bool ok() const;
};

// Runs the job and hands its outcome to `publish`, then returns it. A run that ends with actors still
// parked (a failed node, sim.max_time) cannot be torn down: after `publish` the process exits, with
// status 1 (0 for a run that completed all the same). Throws std::runtime_error naming the module when
// it cannot be loaded, ScenarioError for a scenario with validators. SimGrid's engine is one per process:
// call once.
AppRun run_app_simulation(const Scenario& scenario, const AppOptions& options,
                          const std::function<void(const AppRun&)>& publish);

}  // namespace pstwin::simapp
