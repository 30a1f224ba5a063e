// `pstwin compare SIM_DIR REAL_DIR`: errors computed as (sim - real) / real, links paired by name, the
// tolerance gate, bad directories as bad input, and the real thing on a simulated and a real quickstart.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "report/compare.hpp"
#include "report/run_report.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

RunReport report(const std::string& backend, std::vector<double> times, std::vector<LinkUsage> links) {
  RunReport r;
  r.scenario = "s";
  r.backend = backend;
  r.completed = true;
  for (std::size_t i = 0; i < times.size(); ++i) r.iterations.push_back({static_cast<int>(i), times[i]});
  r.links = std::move(links);
  return r;
}

void write_results(const RunReport& r, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "results.json") << to_json(r).dump(2);
}

TEST(Compare, RelativeErrorsAndLinkPairing) {
  const RunReport sim = report("sim", {1.0, 2.0}, {{"h0.up", 100, 10, 0.5}, {"h1.up", 50, 10, 0.25}});
  const RunReport real = report("real", {1.25, 2.5}, {{"h0.up", 200, 10, 0.4}, {"h9.up", 7, 10, 0.1}});
  const Comparison c = compare_reports(sim, real);
  ASSERT_TRUE(c.mean_iteration.relative_error());
  EXPECT_DOUBLE_EQ(*c.mean_iteration.relative_error(), (1.5 - 1.875) / 1.875);
  ASSERT_EQ(c.iterations.size(), 2u);
  EXPECT_DOUBLE_EQ(*c.iterations[0].relative_error(), -0.2);
  ASSERT_EQ(c.link_bytes.size(), 3u);  // h0 on both sides, h1 only simulated, h9 only real
  EXPECT_EQ(c.link_bytes[0].name, "h0.up");
  EXPECT_DOUBLE_EQ(*c.link_bytes[0].relative_error(), -0.5);
  EXPECT_DOUBLE_EQ(*c.link_utilization[0].relative_error(), 0.25);
  EXPECT_EQ(c.link_bytes[1].name, "h1.up");
  EXPECT_FALSE(c.link_bytes[1].real);
  EXPECT_FALSE(c.link_bytes[1].relative_error());
  EXPECT_EQ(c.link_bytes[2].name, "h9.up");
  EXPECT_FALSE(c.link_bytes[2].sim);
  const std::string text = comparison_text(c);
  EXPECT_NE(text.find("-20.0 %"), std::string::npos) << text;
  EXPECT_NE(text.find("h9.up"), std::string::npos) << text;
}

TEST(Compare, NotesWhatWeakensTheComparison) {
  RunReport real = report("real", {1.0}, {});
  real.emulation = NetworkEmulation{"netns", false, ""};
  const Comparison c = compare_reports(report("sim", {1.0, 1.0}, {{"h0.up", 1, 1, 1}}), real);
  const std::string text = comparison_text(c);
  EXPECT_NE(text.find("iteration counts differ"), std::string::npos) << text;
  EXPECT_NE(text.find("no link counters"), std::string::npos) << text;
  EXPECT_NE(text.find("latency was not emulated"), std::string::npos) << text;
}

TEST(Compare, ToleranceGateAndBadDirectories) {
  const auto dir = testing::fresh_dir("compare-gate");
  write_results(report("sim", {1.05}, {}), dir / "sim");
  write_results(report("real", {1.0}, {}), dir / "real");
  const std::string args = "compare " + (dir / "sim").string() + " " + (dir / "real").string();
  auto r = testing::run_pstwin(args + " --tolerance 0.1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("+5.0 %"), std::string::npos) << r.output;
  r = testing::run_pstwin(args + " --tolerance 0.01");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("differs by more than 1 %"), std::string::npos) << r.output;

  std::filesystem::create_directories(dir / "empty");
  r = testing::run_pstwin("compare " + (dir / "sim").string() + " " + (dir / "empty").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find((dir / "empty" / "results.json").string() + ": cannot be read"), std::string::npos)
      << r.output;
  std::ofstream(dir / "empty" / "results.json") << "{\"scenario\": 3}";
  r = testing::run_pstwin("compare " + (dir / "sim").string() + " " + (dir / "empty").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not a pstwin results.json"), std::string::npos) << r.output;
}

// The real thing: the quickstart simulated and run as local processes, compared.
TEST(Compare, SimAndRealQuickstart) {
  const auto dir = testing::fresh_dir("compare-quickstart");
  const std::string sets = " -q --set workload.iterations=2 --out ";
  auto r = testing::run_pstwin("sim scenarios/quickstart.toml" + sets + (dir / "sim").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Not quiet: the summary says the links carry bytes only.
  r = testing::run_pstwin("run scenarios/quickstart.toml --set workload.iterations=2 --out " +
                          (dir / "real").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no bandwidth was emulated"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("% utilisation"), std::string::npos) << r.output;
  // Real links on loopback: per host, the message bytes its nodes sent and received. The worker on h3
  // pushes the whole model (5.3 MB + headers) each iteration and pulls it back, as in the simulator.
  const auto real = testing::read_json(dir / "real" / "results.json");
  const auto sim = testing::read_json(dir / "sim" / "results.json");
  ASSERT_EQ(real["links"].size(), sim["links"].size());
  for (std::size_t i = 0; i < sim["links"].size(); ++i) {
    EXPECT_EQ(real["links"][i]["name"], sim["links"][i]["name"]);
    // Workers and servers exchange exactly the simulated message bytes, apart from control traffic
    // (heartbeats, timing-dependent): within 1 %.
    const double s = sim["links"][i]["bytes"].get<double>();
    const double re = real["links"][i]["bytes"].get<double>();
    if (s > 1e6) {
      EXPECT_NEAR(re / s, 1.0, 0.01) << sim["links"][i]["name"];
    }
    // Loopback emulates no bandwidth: no utilisation against one; the simulator's links have both.
    EXPECT_FALSE(real["links"][i].contains("utilization")) << real["links"][i];
    EXPECT_FALSE(real["links"][i].contains("bandwidth_Bps")) << real["links"][i];
    EXPECT_TRUE(sim["links"][i].contains("utilization")) << sim["links"][i];
  }
  r = testing::run_pstwin("compare " + (dir / "sim").string() + " " + (dir / "real").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected : {"mean", "iteration 0", "iteration 1", "h3.up", "h3.down", "link utilisation",
                               "the real run was on loopback"})
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << " in\n" << r.output;
}

}  // namespace
}  // namespace pstwin
