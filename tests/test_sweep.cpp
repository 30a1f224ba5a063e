// pstwin sweep's pieces: the grid's parsing and product, what a CSV row says about a run, and the
// command end to end (its rows against single `pstwin sim` runs, its plots, its errors).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "report/sweep.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::fresh_dir;
using testing::read_json;
using testing::read_text;
using testing::run_pstwin;

std::vector<std::string> split(const std::string& line, char by = ',') {
  std::vector<std::string> fields;
  std::stringstream in(line);
  for (std::string field; std::getline(in, field, by);) fields.push_back(field);
  if (!line.empty() && line.back() == by) fields.emplace_back();
  return fields;
}

TEST(Sweep, GridAxisParsesFieldAndValues) {
  const auto axis = parse_grid_axis("roles.workers=8,16,32");
  EXPECT_EQ(axis.field, "roles.workers");
  EXPECT_EQ(axis.values, (std::vector<std::string>{"8", "16", "32"}));
  EXPECT_EQ(parse_grid_axis("cluster.host_bandwidth=10Gbps").values, std::vector<std::string>{"10Gbps"});
  EXPECT_THROW(parse_grid_axis("roles.workers"), ScenarioError);
  EXPECT_THROW(parse_grid_axis("=8"), ScenarioError);
  EXPECT_THROW(parse_grid_axis("roles.workers=8,,16"), ScenarioError);
  EXPECT_THROW(parse_grid_axis("roles.workers="), ScenarioError);
  try {
    parse_grid_axis("roles.workers=8,16,8");
    FAIL() << "a repeated value was accepted";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("value 8 is listed twice"), std::string::npos) << e.what();
  }
}

TEST(Sweep, GridPointsAreTheProductFirstAxisSlowest) {
  const std::vector<GridAxis> axes = {{"a", {"1", "2"}}, {"b", {"x", "y", "z"}}};
  const auto points = grid_points(axes);
  ASSERT_EQ(points.size(), 6u);
  EXPECT_EQ(points.front(), (std::vector<std::string>{"1", "x"}));
  EXPECT_EQ(points[2], (std::vector<std::string>{"1", "z"}));
  EXPECT_EQ(points[3], (std::vector<std::string>{"2", "x"}));
  EXPECT_EQ(points.back(), (std::vector<std::string>{"2", "z"}));
}

TEST(Sweep, MeasuresSplitCorrectnessFromPerformance) {
  RunReport report;
  report.completed = true;
  report.iterations = {{0, 1.0}, {1, 2.0}, {2, 3.0}};
  report.bound = Bound{1.5, "f", 0};
  report.violation_count = 3;
  report.invariant_tallies["bound"] = {1, 1};
  report.invariant_tallies["aggregates"] = {10, 2};
  const auto m = sweep_measures(report);
  EXPECT_EQ(m.iterations, 3u);
  EXPECT_DOUBLE_EQ(m.mean_s, 2.0);
  EXPECT_DOUBLE_EQ(m.spread_s, 1.0);  // sample standard deviation of 1, 2, 3
  EXPECT_DOUBLE_EQ(m.min_s, 1.0);
  EXPECT_DOUBLE_EQ(m.max_s, 3.0);
  ASSERT_TRUE(m.ratio);
  EXPECT_DOUBLE_EQ(*m.ratio, 2.0 / 1.5);
  EXPECT_EQ(m.performance_violations, 1u);
  EXPECT_EQ(m.correctness_violations, 2u);
  EXPECT_FALSE(m.accuracy);
  // A run that did not complete is a correctness problem even when no invariant was counted.
  RunReport failed;
  EXPECT_EQ(sweep_measures(failed).correctness_violations, 1u);
  // lb runs: the ratio divides the achieved time the bound names (its balanced iterations).
  report.bound->achieved_s = 1.8;
  EXPECT_DOUBLE_EQ(*sweep_measures(report).ratio, 1.8 / 1.5);
}

TEST(Sweep, CsvQuotesFieldsAndWritesNumbersExactly) {
  std::vector<GridAxis> axes = {{"roles.workers", {"2"}}};
  RunReport report;
  report.completed = true;
  report.iterations = {{0, 0.1}, {1, 0.2}};
  report.replay = "pstwin sim x.toml --set 'a=b,c'";
  const std::vector<SweepRun> runs = {{{"2"}, 7, report}};
  const std::string csv = sweep_csv(axes, runs);
  std::stringstream in(csv);
  std::string header, row;
  std::getline(in, header);
  std::getline(in, row);
  EXPECT_EQ(header,
            "roles.workers,seed,completed,iterations,iteration_mean_s,iteration_spread_s,iteration_min_s,"
            "iteration_max_s,bound_s,ratio,accuracy,correctness_violations,performance_violations,run_time_s,"
            "replay");
  const auto fields = split(row.substr(0, row.find(",\"")));
  ASSERT_EQ(fields.size(), 14u) << row;  // the replay, quoted, cut off above
  EXPECT_EQ(fields[0], "2");
  EXPECT_EQ(fields[1], "7");
  EXPECT_EQ(fields[2], "true");
  EXPECT_EQ(fields[3], "2");
  // Shortest exact text: it reads back as the very double the report holds.
  EXPECT_EQ(std::stod(fields[4]), report.mean_iteration_s());
  EXPECT_EQ(fields[4], "0.15000000000000002");
  EXPECT_NEAR(std::stod(fields[5]), 0.0707106781, 1e-9);
  EXPECT_EQ(fields[8], "");  // no bound, so no ratio either
  EXPECT_EQ(fields[9], "");
  EXPECT_EQ(fields[10], "");  // nothing trained
  EXPECT_NE(row.find(",\"pstwin sim x.toml --set 'a=b,c'\""), std::string::npos) << row;
}

// The command end to end: every CSV row is what `pstwin sim` reports for that grid point and seed.
TEST(Sweep, CsvRowsMatchSingleRunsAndPlotsAreWritten) {
  const auto dir = fresh_dir("sweep");
  const std::string fixed = " --set workload.iterations=3 --set perturbation.delivery_jitter=20us";
  const auto r = run_pstwin(
      "sweep scenarios/saturation_8w2s.toml --grid roles.workers=2,4 --grid "
      "roles.servers=1,2 --seeds 2 -j 2" +
      fixed + " --out " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Progress with an ETA, then a line per grid point.
  EXPECT_NE(r.output.find("[pstwin] sweep: 1 of 8 runs done"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ETA"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("roles.workers=4 roles.servers=2: iteration"), std::string::npos) << r.output;

  const std::string csv = read_text(dir / "sweep.csv");
  std::stringstream in(csv);
  std::string line;
  std::getline(in, line);
  const auto header = split(line);
  ASSERT_EQ(header.front(), "roles.workers");
  ASSERT_EQ(header[1], "roles.servers");
  auto column = [&](std::string_view name) {
    return static_cast<std::size_t>(std::find(header.begin(), header.end(), name) - header.begin());
  };
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) rows.push_back(split(line));
  ASSERT_EQ(rows.size(), 8u) << csv;
  // Grid order, the first field slowest, seeds from the scenario's (1).
  EXPECT_EQ(rows[0][0], "2");
  EXPECT_EQ(rows[0][1], "1");
  EXPECT_EQ(rows[0][column("seed")], "1");
  EXPECT_EQ(rows[1][column("seed")], "2");
  EXPECT_EQ(rows[7][0], "4");
  EXPECT_EQ(rows[7][1], "2");
  // The jitter makes seeds differ, so the check below compares distinct runs.
  EXPECT_NE(rows[0][column("iteration_mean_s")], rows[1][column("iteration_mean_s")]);
  for (const std::size_t i : {std::size_t{1}, std::size_t{6}}) {
    const auto& row = rows[i];
    const auto single = fresh_dir("sweep-single-" + std::to_string(i));
    const auto s = run_pstwin("sim scenarios/saturation_8w2s.toml -q --seed " + row[column("seed")] + fixed +
                              " --set roles.workers=" + row[0] + " --set roles.servers=" + row[1] +
                              " --out " + single.string());
    // Exit status 1 where the run misses its bound: a result, not a failure, for the sweep.
    ASSERT_TRUE(std::filesystem::exists(single / "results.json")) << s.output;
    const auto results = read_json(single / "results.json");
    EXPECT_EQ(row[column("performance_violations")], std::to_string(s.exit_code));
    EXPECT_EQ(std::stod(row[column("iteration_mean_s")]), results["mean_iteration_s"].get<double>()) << line;
    EXPECT_EQ(std::stod(row[column("bound_s")]), results["bound"]["time_s"].get<double>());
    EXPECT_EQ(row[column("iterations")], std::to_string(results["iterations"].size()));
    EXPECT_EQ(row[column("correctness_violations")], "0");
    EXPECT_EQ(row[column("completed")], "true");
  }
  const auto meta = read_json(dir / "sweep.json");
  EXPECT_EQ(meta["scenario"], "saturation_8w2s");
  EXPECT_EQ(meta["grid"][1]["field"], "roles.servers");
  EXPECT_EQ(meta["seeds"], nlohmann::json::parse("[1, 2]"));
  // Plots where matplotlib is installed; otherwise the command says it skipped them.
  if (r.output.find("plots skipped") == std::string::npos) {
    for (const char* name : {"iteration_time", "ratio", "violations"})
      for (const char* ext : {".png", ".svg"})
        EXPECT_GT(std::filesystem::file_size(dir / (std::string(name) + ext)), 1000u) << name << ext;
    EXPECT_FALSE(std::filesystem::exists(dir / "accuracy.png"));  // nothing was trained
    const std::string svg = read_text(dir / "iteration_time.svg");
    EXPECT_NE(svg.find("saturation_8w2s"), std::string::npos);
    EXPECT_NE(svg.find("roles.servers=2"), std::string::npos);
  } else {
    EXPECT_NE(r.output.find("apt-get install python3-matplotlib"), std::string::npos) << r.output;
  }

  // The same sweep again: the same CSV, byte for byte.
  const auto again_dir = fresh_dir("sweep-again");
  const auto again = run_pstwin(
      "sweep scenarios/saturation_8w2s.toml -q --no-plots --grid roles.workers=2,4 "
      "--grid roles.servers=1,2 --seeds 2 -j 1" +
      fixed + " --out " + again_dir.string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(testing::without_sanitizer_notices(again.output), "");
  EXPECT_EQ(read_text(again_dir / "sweep.csv"), csv);
  EXPECT_FALSE(std::filesystem::exists(again_dir / "iteration_time.png"));
}

TEST(Sweep, BadGridValuesFailBeforeAnythingRuns) {
  const auto dir = fresh_dir("sweep-bad");
  const auto r =
      run_pstwin("sweep scenarios/quickstart.toml --grid roles.workers=2,zero --out " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("roles.workers"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "sweep.csv"));
  const auto twice =
      run_pstwin("sweep scenarios/quickstart.toml --grid roles.workers=2 --grid roles.workers=4");
  EXPECT_EQ(twice.exit_code, 2) << twice.output;
  EXPECT_NE(twice.output.find("already a grid axis"), std::string::npos) << twice.output;
}

// Correctness violations and missed bounds are counted apart, and a run with a correctness violation
// makes the exit status 1 and prints its replay.
TEST(Sweep, CorrectnessViolationsFailTheSweepWithReplays) {
  const auto dir = fresh_dir("sweep-crossed");
  const auto r = run_pstwin(
      "sweep scenarios/crossed_line.toml --no-plots --grid "
      "staging.naming=legacy-key-only,per-rank --first-seed 0 --out " +
      dir.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("replay: pstwin sim"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("staging.naming=legacy-key-only"), std::string::npos) << r.output;
  const std::string csv = read_text(dir / "sweep.csv");
  std::stringstream in(csv);
  std::string header, legacy, per_rank;
  std::getline(in, header);
  std::getline(in, legacy);
  std::getline(in, per_rank);
  const auto h = split(header);
  const auto c =
      static_cast<std::size_t>(std::find(h.begin(), h.end(), "correctness_violations") - h.begin());
  EXPECT_NE(split(legacy)[c], "0") << csv;
  EXPECT_EQ(split(per_rank)[c], "0") << csv;
}

}  // namespace
}  // namespace pstwin
