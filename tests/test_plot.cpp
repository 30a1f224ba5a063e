// pstwin plot end to end: a simulated run's results.json drawn as PNG and SVG files that are what
// their names say, titled from the scenario, byte-identical when drawn twice.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::fresh_dir;
using testing::read_text;
using testing::run_pstwin;

// A PNG starts with its 8-byte signature and then its IHDR chunk; a truncated file has no IEND.
void expect_png(const std::filesystem::path& path) {
  const std::string png = read_text(path);
  ASSERT_GT(png.size(), 1000u) << path;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << path;
  EXPECT_EQ(png.substr(12, 4), "IHDR") << path;
  EXPECT_EQ(png.substr(png.size() - 8, 4), "IEND") << path;
}

std::string expect_svg(const std::filesystem::path& path) {
  const std::string svg = read_text(path);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << path;
  EXPECT_NE(svg.find("<svg"), std::string::npos) << path;
  EXPECT_NE(svg.find("</svg>"), std::string::npos) << path;
  return svg;
}

TEST(Plot, SimRunGivesPngAndSvgTitledFromTheScenario) {
  const auto run = fresh_dir("plot-run");
  const auto sim = run_pstwin("sim scenarios/quickstart.toml -q --out " + run.string());
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  const auto plots = fresh_dir("plot-out");
  const auto r = run_pstwin("plot " + run.string() + " --out " + plots.string());
  if (r.output.find("matplotlib is not installed") != std::string::npos) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("apt-get install python3-matplotlib"), std::string::npos) << r.output;
    GTEST_SKIP() << "python3's matplotlib is not installed: `pstwin plot` said so (" << r.output << ")";
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"iterations", "links"}) {
    expect_png(plots / (std::string(name) + ".png"));
    const std::string svg = expect_svg(plots / (std::string(name) + ".svg"));
    // The title: the scenario's name, backend and seed.
    EXPECT_NE(svg.find("quickstart (sim, seed 1)"), std::string::npos) << name;
  }
  const std::string iterations = read_text(plots / "iterations.svg");
  EXPECT_NE(iterations.find("iteration time (ms)"), std::string::npos);
  EXPECT_NE(iterations.find("analytic bound"), std::string::npos);
  // The description, from resolved.toml.
  EXPECT_NE(iterations.find("2 servers, 4 workers"), std::string::npos);
  // Simulated links have a bandwidth: their utilisation is drawn, in all and over time.
  EXPECT_NE(read_text(plots / "links.svg").find("simulated bandwidth 10 Gb/s"), std::string::npos);
  expect_png(plots / "links_over_time.png");
  EXPECT_NE(read_text(plots / "links_over_time.svg").find("link utilisation over time"), std::string::npos);
  // Nothing was trained.
  EXPECT_FALSE(std::filesystem::exists(plots / "accuracy.png"));
  // No --out: next to results.json, and the same bytes (fixed ids, no dates).
  const auto again = run_pstwin("plot -q " + run.string());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output, "");
  EXPECT_EQ(read_text(run / "iterations.svg"), iterations);
  EXPECT_EQ(read_text(run / "links.png"), read_text(plots / "links.png"));
}

TEST(Plot, DirectoryWithoutResultsIsNamed) {
  const auto empty = fresh_dir("plot-empty");
  const auto r = run_pstwin("plot " + empty.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("holds no results.json"), std::string::npos) << r.output;
  EXPECT_NE(run_pstwin("plot " + (empty / "absent").string()).exit_code, 0);
}

}  // namespace
}  // namespace pstwin
