// `pstwin compare SIM_DIR REAL_DIR`: a simulated and a real run of one scenario side by side (mean and
// per-iteration time, per-link bytes and utilisation) with the simulator's relative error against
// the real run: (sim - real) / real. Links are paired by name (`<h>.up`, `<h>.down`).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report/run_report.hpp"

namespace pstwin {

struct CompareRow {
  std::string name;  // "iteration 3", "mean", "h1.up bytes", ...
  std::optional<double> sim;
  std::optional<double> real;
  // (sim - real) / real; empty when either side is missing or real is 0.
  std::optional<double> relative_error() const;
};

struct Comparison {
  std::string scenario;
  CompareRow mean_iteration;
  std::vector<CompareRow> iterations;
  std::vector<CompareRow> link_bytes;
  std::vector<CompareRow> link_utilization;
  std::vector<std::string> notes;  // what makes the comparison weaker (no link counters, latency, ...)
};

Comparison compare_reports(const RunReport& sim, const RunReport& real);

// A readable table: one line per row, relative errors in percent.
std::string comparison_text(const Comparison& comparison);

// DIR/results.json as a report; throws std::runtime_error naming the file and what is wrong.
RunReport load_results(const std::string& dir);

}  // namespace pstwin
