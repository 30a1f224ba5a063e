// A sweep: one scenario run over the product of grid values and seeds, written as sweep.csv (one row
// per run) and sweep.json (the grid, for the plotting script's titles and axes). docs/SWEEP.md.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/run_report.hpp"

namespace pstwin {

struct GridAxis {
  std::string field;                // a dotted scenario path, as --set takes it: "roles.workers"
  std::vector<std::string> values;  // as --set takes them: "8", "10Gbps"
};

// "roles.workers=8,16,32" -> {"roles.workers", {"8", "16", "32"}}; throws ScenarioError naming the
// argument when there is no '=', no value, an empty value or a value given twice.
GridAxis parse_grid_axis(std::string_view text);

// Every combination of one value per axis, the first axis varying slowest: sweep.csv's row order.
std::vector<std::vector<std::string>> grid_points(std::span<const GridAxis> axes);

// What sweep.csv says about one run. Spread is the standard deviation over the run's iterations.
struct SweepMeasures {
  bool completed = false;
  std::size_t iterations = 0;
  double mean_s = 0;
  double spread_s = 0;
  double min_s = 0;
  double max_s = 0;
  std::optional<double> bound_s;
  std::optional<double> ratio;     // achieved / bound, achieved as results.json's bound.achieved_s
  std::optional<double> accuracy;  // final test accuracy, trained workloads only
  // Correctness: every violation but a missed performance bound (a failed run counts as one).
  std::uint64_t correctness_violations = 0;
  std::uint64_t performance_violations = 0;  // the analytic bound missed (invariants.bound_tolerance)
};
SweepMeasures sweep_measures(const RunReport& report);

struct SweepRun {
  std::vector<std::string> values;  // one per axis
  std::uint64_t seed = 0;
  RunReport report;
};

// The columns after the grid fields, in sweep.csv's order.
std::span<const std::string_view> sweep_measure_columns();

// sweep.csv: a header (the grid fields, then sweep_measure_columns()), then one row per run in the
// order given. Numbers in their shortest exact form (as results.json writes them); empty where a
// measure does not apply.
std::string sweep_csv(std::span<const GridAxis> axes, std::span<const SweepRun> runs);

// sweep.json: the scenario's name and description, the grid, the seeds and the file names.
nlohmann::ordered_json sweep_json(const Scenario& scenario, std::span<const GridAxis> axes,
                                  std::span<const std::uint64_t> seeds);

// One line per grid point: its values, then mean iteration time +/- the spread over seeds, the ratio
// to the bound, accuracy and violations, for the terminal.
std::string sweep_table(std::span<const GridAxis> axes, std::span<const SweepRun> runs);

}  // namespace pstwin
