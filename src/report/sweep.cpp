#include "report/sweep.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

namespace pstwin {
namespace {

// Shortest text that reads back as the same double, as nlohmann writes results.json: a CSV value
// compares equal to the single run's.
std::string number(double value) {
  std::array<char, 32> text{};
  const auto [end, error] = std::to_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{}) return "nan";
  return std::string(text.data(), end);
}

std::string optional_number(const std::optional<double>& value) {
  return value ? number(*value) : std::string();
}

// RFC 4180: a field holding a comma, quote or line break is quoted, quotes doubled.
std::string csv_field(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

struct MeanSpread {
  double mean = 0;
  double spread = 0;  // sample standard deviation; 0 for one value
};

MeanSpread mean_spread(std::span<const double> values) {
  if (values.empty()) return {};
  double total = 0;
  for (double v : values) total += v;
  const double mean = total / static_cast<double>(values.size());
  if (values.size() < 2) return {mean, 0};
  double squares = 0;
  for (double v : values) squares += (v - mean) * (v - mean);
  return {mean, std::sqrt(squares / static_cast<double>(values.size() - 1))};
}

constexpr std::array<std::string_view, 14> kColumns = {"seed",
                                                       "completed",
                                                       "iterations",
                                                       "iteration_mean_s",
                                                       "iteration_spread_s",
                                                       "iteration_min_s",
                                                       "iteration_max_s",
                                                       "bound_s",
                                                       "ratio",
                                                       "accuracy",
                                                       "correctness_violations",
                                                       "performance_violations",
                                                       "run_time_s",
                                                       "replay"};

}  // namespace

GridAxis parse_grid_axis(std::string_view text) {
  const auto eq = text.find('=');
  const std::string shown = "--grid " + std::string(text);
  if (eq == std::string_view::npos || eq == 0)
    throw ScenarioError(shown + ": expected FIELD=V1,V2,..., e.g. --grid roles.workers=8,16,32");
  GridAxis axis{std::string(text.substr(0, eq)), {}};
  std::string_view rest = text.substr(eq + 1);
  while (true) {
    const auto comma = rest.find(',');
    const std::string value(rest.substr(0, comma));
    if (value.empty()) throw ScenarioError(shown + ": an empty value; list values as V1,V2,...");
    if (std::ranges::find(axis.values, value) != axis.values.end())
      throw ScenarioError(shown + ": value " + value + " is listed twice");
    axis.values.push_back(value);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return axis;
}

std::vector<std::vector<std::string>> grid_points(std::span<const GridAxis> axes) {
  std::vector<std::vector<std::string>> points{{}};
  for (const auto& axis : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& point : points)
      for (const auto& value : axis.values) {
        next.push_back(point);
        next.back().push_back(value);
      }
    points = std::move(next);
  }
  return points;
}

SweepMeasures sweep_measures(const RunReport& report) {
  SweepMeasures m;
  m.completed = report.completed;
  m.iterations = report.iterations.size();
  std::vector<double> times;
  for (const auto& it : report.iterations) times.push_back(it.time_s);
  m.mean_s = report.mean_iteration_s();
  m.spread_s = mean_spread(times).spread;
  if (!times.empty()) {
    m.min_s = *std::ranges::min_element(times);
    m.max_s = *std::ranges::max_element(times);
  }
  if (report.bound && report.bound->time_s > 0) {
    m.bound_s = report.bound->time_s;
    // The same achieved time the summary divides: lb runs compare their balanced iterations.
    const double achieved = report.bound->achieved_s > 0 ? report.bound->achieved_s : m.mean_s;
    if (!times.empty()) m.ratio = achieved / report.bound->time_s;
  }
  if (report.accuracy) m.accuracy = report.accuracy->final_accuracy;
  const auto bound = report.invariant_tallies.find("bound");
  m.performance_violations = bound == report.invariant_tallies.end() ? 0 : bound->second.violated;
  m.correctness_violations =
      report.violation_count - std::min(report.violation_count, m.performance_violations);
  if (!report.completed && m.correctness_violations == 0) m.correctness_violations = 1;
  return m;
}

std::span<const std::string_view> sweep_measure_columns() {
  return kColumns;
}

std::string sweep_csv(std::span<const GridAxis> axes, std::span<const SweepRun> runs) {
  std::ostringstream out;
  for (const auto& axis : axes) out << csv_field(axis.field) << ",";
  for (std::size_t c = 0; c < kColumns.size(); ++c) out << (c ? "," : "") << kColumns[c];
  out << "\n";
  for (const auto& run : runs) {
    const SweepMeasures m = sweep_measures(run.report);
    for (const auto& value : run.values) out << csv_field(value) << ",";
    out << run.seed << "," << (m.completed ? "true" : "false") << "," << m.iterations << ","
        << number(m.mean_s) << "," << number(m.spread_s) << "," << number(m.min_s) << "," << number(m.max_s)
        << "," << optional_number(m.bound_s) << "," << optional_number(m.ratio) << ","
        << optional_number(m.accuracy) << "," << m.correctness_violations << "," << m.performance_violations
        << "," << number(run.report.run_time_s) << "," << csv_field(run.report.replay) << "\n";
  }
  return out.str();
}

nlohmann::ordered_json sweep_json(const Scenario& scenario, std::span<const GridAxis> axes,
                                  std::span<const std::uint64_t> seeds) {
  nlohmann::ordered_json grid = nlohmann::ordered_json::array();
  for (const auto& axis : axes) grid.push_back({{"field", axis.field}, {"values", axis.values}});
  return {{"scenario", scenario.name},
          {"description", scenario.description},
          {"source", scenario.source_path},
          {"grid", std::move(grid)},
          {"seeds", std::vector<std::uint64_t>(seeds.begin(), seeds.end())},
          {"csv", "sweep.csv"},
          {"columns", std::vector<std::string>(kColumns.begin(), kColumns.end())}};
}

std::string sweep_table(std::span<const GridAxis> axes, std::span<const SweepRun> runs) {
  // Grid points in the order they first appear (the grid's order), each with its seeds' measures.
  std::vector<std::vector<std::string>> order;
  std::map<std::vector<std::string>, std::vector<SweepMeasures>> by_point;
  for (const auto& run : runs) {
    auto [it, fresh] = by_point.try_emplace(run.values);
    if (fresh) order.push_back(run.values);
    it->second.push_back(sweep_measures(run.report));
  }
  std::ostringstream out;
  out << std::setprecision(4);
  for (const auto& point : order) {
    const auto& measures = by_point[point];
    std::vector<double> means, ratios, accuracies;
    std::uint64_t correctness = 0, performance = 0, failed = 0;
    for (const auto& m : measures) {
      means.push_back(m.mean_s);
      if (m.ratio) ratios.push_back(*m.ratio);
      if (m.accuracy) accuracies.push_back(*m.accuracy);
      correctness += m.correctness_violations;
      performance += m.performance_violations;
      failed += m.completed ? 0 : 1;
    }
    out << " ";
    for (std::size_t a = 0; a < axes.size(); ++a) out << " " << axes[a].field << "=" << point[a];
    const auto time = mean_spread(means);
    out << ": iteration " << std::fixed << std::setprecision(3) << time.mean * 1e3 << " +/- "
        << time.spread * 1e3 << " ms";
    if (!ratios.empty()) {
      const auto ratio = mean_spread(ratios);
      out << ", " << ratio.mean << " x bound";
    }
    if (!accuracies.empty()) {
      const auto accuracy = mean_spread(accuracies);
      out << ", accuracy " << std::setprecision(4) << accuracy.mean << " +/- " << accuracy.spread;
    }
    out << std::defaultfloat;
    out << ", " << correctness << " correctness / " << performance << " performance violation"
        << (correctness + performance == 1 ? "" : "s");
    if (failed > 0) out << ", " << failed << " of " << measures.size() << " runs did not complete";
    out << " (" << measures.size() << " seed" << (measures.size() == 1 ? "" : "s") << ")\n";
  }
  return out.str();
}

}  // namespace pstwin
