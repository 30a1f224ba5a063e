// Runs one scenario in SimGrid and returns its report. SimGrid's engine is a per-process singleton,
// so run_simulation may be called once per process; run_isolated forks a child for each run.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "report/run_report.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::sim {

struct SimOptions {
  // Called now and then with a one-line progress text (simulated time, iterations); may be empty.
  std::function<void(const std::string&)> progress;
  double progress_interval_wall_s = 2.0;
};

RunReport run_simulation(const Scenario& scenario, const SimOptions& options = {});

// SimGrid rejects some settings of sim.simgrid_config (an unknown model, a context factory) only
// when it builds the platform or starts an actor, and then aborts the process. This tries them on a
// two-host platform in a forked child first and throws a ScenarioError naming sim.simgrid_config and
// SimGrid's own complaint; with no extra settings it does nothing.
void check_simgrid_config(const Scenario& scenario);

// Runs each scenario in its own forked child process, at most `jobs` at once, the costliest (most
// messages) first, and returns their reports (without traces) in input order. A child that crashes yields a
// report whose failure says so. `on_done(index, report)` is called as each run finishes.
std::vector<RunReport> run_isolated(const std::vector<Scenario>& scenarios, int jobs,
                                    const std::function<void(std::size_t, const RunReport&)>& on_done = {});

}  // namespace pstwin::sim
