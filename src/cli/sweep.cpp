// pstwin sweep: a scenario over the product of grid values and seeds, in forked simulator children.
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/data_files.hpp"
#include "report/run_report.hpp"
#include "report/sweep.hpp"
#include "scenario/scenario.hpp"
#include "sim/simulation.hpp"

namespace pstwin::cli {
namespace {

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string duration_text(double seconds) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(seconds < 10 ? 1 : 0) << seconds << " s";
  return out.str();
}

// The plotting script's exit status for "python3 runs but has no matplotlib".
constexpr int kNoMatplotlib = 3;

// Draws the plots with tools/pstwin_plot.py; a machine without python3 or matplotlib still has the
// CSV, and is told what to install. Returns false only when the script itself failed.
bool draw_plots(const std::string& out_dir, bool quiet) {
  const std::string script = data_file("tools/pstwin_plot.py");
  if (!std::filesystem::exists(script)) {
    std::cerr << "pstwin sweep: plots skipped: " << script
              << " is missing (the binary's installation or source tree moved); sweep.csv is written\n";
    return true;
  }
  // The first python3 on PATH may be a private one (pyenv, a virtualenv) without the system's
  // matplotlib: the system's interpreter is tried next. PSTWIN_PYTHON names another.
  std::vector<std::string> interpreters = {"python3", "/usr/bin/python3"};
  if (const char* chosen = std::getenv("PSTWIN_PYTHON")) interpreters = {chosen};
  // Probe quietly for an interpreter with matplotlib, then run the script where its errors show.
  std::string python = interpreters.back();
  for (const auto& candidate : interpreters)
    if (std::system((shell_quote(candidate) + " -c 'import matplotlib' >/dev/null 2>&1").c_str()) == 0) {
      python = candidate;
      break;
    }
  const std::string command = shell_quote(python) + " " + shell_quote(script) + " sweep " +
                              shell_quote(out_dir) + (quiet ? " --quiet" : "");
  std::cout.flush();
  const int status = std::system(command.c_str());
  const int code = status == -1 ? 127 : (WIFEXITED(status) ? WEXITSTATUS(status) : 128);
  if (code == 0) return true;
  if (code == kNoMatplotlib || code == 127) {
    std::cerr << "pstwin sweep: plots skipped: " << (code == 127 ? "python3" : "python3's matplotlib")
              << " is not installed (Debian: apt-get install python3-matplotlib); sweep.csv and sweep.json "
                 "are written\n";
    return true;
  }
  std::cerr << "pstwin sweep: the plotting script failed (exit status " << code << "): " << command << "\n";
  return false;
}

}  // namespace

int run_sweep(const CommonOptions& common, const SweepOptions& options) {
  // The CLI, not protocol code: the wall clock only feeds the progress line's elapsed time and ETA.
  const auto wall_start = std::chrono::steady_clock::now();
  std::vector<std::pair<std::string, std::string>> user_sets;
  for (const auto& text : common.sets) user_sets.push_back(split_override(text));
  std::vector<GridAxis> axes;
  for (const auto& text : options.grid) {
    axes.push_back(parse_grid_axis(text));
    for (std::size_t a = 0; a + 1 < axes.size(); ++a)
      if (axes[a].field == axes.back().field)
        throw ScenarioError("--grid " + text + ": field " + axes.back().field + " is already a grid axis");
  }
  const Scenario base = load_scenario(common.scenario_path, user_sets);
  std::vector<std::uint64_t> seeds;
  for (std::uint64_t s = 0; s < options.seeds; ++s)
    seeds.push_back(options.first_seed.value_or(base.seed) + s);

  // Every grid point is loaded (and validated) before anything runs: a bad value fails at once.
  std::vector<SweepRun> runs;
  std::vector<Scenario> scenarios;
  for (const auto& point : grid_points(axes)) {
    auto sets = user_sets;
    for (std::size_t a = 0; a < axes.size(); ++a) sets.emplace_back(axes[a].field, point[a]);
    Scenario scenario = load_scenario(common.scenario_path, sets);
    // No run's trace is written; recording one would only cost memory.
    scenario.output.trace = false;
    for (const auto seed : seeds) {
      scenario.seed = seed;
      scenarios.push_back(scenario);
      runs.push_back({point, seed, {}});
    }
  }

  const std::string out_dir =
      options.out_dir.empty() ? "pstwin-out/" + base.name + "-sweep" : options.out_dir;
  std::filesystem::create_directories(out_dir);
  if (!common.quiet)
    std::cerr << "[pstwin] sweep of " << base.name << ": " << grid_points(axes).size() << " grid point(s) x "
              << seeds.size() << " seed(s) = " << scenarios.size() << " runs, -j " << options.jobs << "\n";
  std::size_t finished = 0;
  auto last_line = wall_start;
  auto reports = sim::run_isolated(scenarios, options.jobs, [&](std::size_t index, const RunReport& report) {
    ++finished;
    if (common.quiet) return;
    const auto now = std::chrono::steady_clock::now();
    // The first, then one line a second at most, and the last: thousands of short runs do not flood
    // the terminal.
    if (finished != 1 && finished != scenarios.size() && now - last_line < std::chrono::seconds(1)) return;
    last_line = now;
    const double elapsed = std::chrono::duration<double>(now - wall_start).count();
    const double eta =
        elapsed / static_cast<double>(finished) * static_cast<double>(scenarios.size() - finished);
    std::cerr << "[pstwin] sweep: " << finished << " of " << scenarios.size() << " runs done ("
              << 100 * finished / scenarios.size() << " %), " << duration_text(elapsed) << " elapsed";
    if (finished != scenarios.size()) std::cerr << ", ETA " << duration_text(eta);
    std::cerr << "; last:";
    for (std::size_t a = 0; a < axes.size(); ++a)
      std::cerr << " " << axes[a].field << "=" << runs[index].values[a];
    std::cerr << " seed " << runs[index].seed << (report.ok() ? "" : " (violations)") << "\n";
  });
  for (std::size_t i = 0; i < runs.size(); ++i) runs[i].report = std::move(reports[i]);

  const std::filesystem::path dir(out_dir);
  write_text(dir / "sweep.csv", sweep_csv(axes, runs));
  write_text(dir / "sweep.json", sweep_json(base, axes, seeds).dump(2) + "\n");
  std::size_t failing = 0;
  std::ostream& out = common.quiet ? std::cerr : std::cout;
  for (const auto& run : runs) {
    const SweepMeasures m = sweep_measures(run.report);
    if (m.correctness_violations == 0) continue;
    ++failing;
    out << "run " << (run.report.completed ? "with correctness violations" : "that did not complete") << ":";
    for (std::size_t a = 0; a < axes.size(); ++a) out << " " << axes[a].field << "=" << run.values[a];
    out << " seed " << run.seed << "\n  replay: " << run.report.replay << "\n";
  }
  if (!common.quiet) {
    std::cout << "sweep of " << base.name << ": " << runs.size() << (runs.size() == 1 ? " run\n" : " runs\n")
              << sweep_table(axes, runs);
    std::cout << "  outputs: " << (dir / "sweep.csv").string() << ", sweep.json\n";
  }
  const bool plotted = !options.plots || draw_plots(out_dir, common.quiet);
  return failing == 0 && plotted ? 0 : 1;
}

}  // namespace pstwin::cli
