// pstwin sweep: a scenario over the product of grid values and seeds, in forked simulator children.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/plot_script.hpp"
#include "cli/shards.hpp"
#include "realnet/node_env.hpp"
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

}  // namespace

bool draw_sweep_plots(const std::string& out_dir, bool quiet) {
  std::vector<std::string> arguments = {"sweep", out_dir};
  if (quiet) arguments.emplace_back("--quiet");
  const PlotOutcome outcome = run_plot_script(arguments);
  if (outcome == PlotOutcome::kFailed) return false;
  if (outcome != PlotOutcome::kDrawn)
    std::cerr << "pstwin sweep: plots skipped: " << plot_outcome_text(outcome)
              << "; sweep.csv and sweep.json are written\n";
  return true;
}

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
  const Shard shard =
      options.shard.empty() ? Shard{} : parse_shard(options.shard, realnet::process_environment());
  std::vector<SweepRun> runs;
  std::vector<Scenario> scenarios;
  std::uint64_t run_index = 0;
  for (const auto& point : grid_points(axes)) {
    auto sets = user_sets;
    for (std::size_t a = 0; a < axes.size(); ++a) sets.emplace_back(axes[a].field, point[a]);
    Scenario scenario = load_scenario(common.scenario_path, sets);
    // No run's trace is written; recording one would only cost memory.
    scenario.output.trace = false;
    for (const auto seed : seeds) {
      if (!shard.holds(run_index++)) continue;
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
  if (shard.count > 1) {
    // `pstwin merge` interleaves the shards' rows back into the unsharded order (src/cli/shards.hpp).
    auto doc = sweep_json(base, axes, seeds);
    doc["shard"] = {{"index", shard.index}, {"count", shard.count}, {"runs", run_index}};
    write_text(dir / shard.file_name("sweep", "csv"), sweep_csv(axes, runs));
    write_text(dir / shard.file_name("sweep", "json"), doc.dump(2) + "\n");
  } else {
    write_text(dir / "sweep.csv", sweep_csv(axes, runs));
    write_text(dir / "sweep.json", sweep_json(base, axes, seeds).dump(2) + "\n");
  }
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
    if (shard.count > 1)
      std::cout << "  outputs: " << (dir / shard.file_name("sweep", "csv")).string() << ", .json (shard "
                << shard.index << "/" << shard.count << ": pstwin merge " << out_dir
                << " once every shard's files are there)\n";
    else
      std::cout << "  outputs: " << (dir / "sweep.csv").string() << ", sweep.json\n";
  }
  const bool plotted = shard.count > 1 || !options.plots || draw_sweep_plots(out_dir, common.quiet);
  return failing == 0 && plotted ? 0 : 1;
}

}  // namespace pstwin::cli
