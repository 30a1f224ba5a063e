// pstwin plot, and the plotting script's runner that `pstwin sweep` shares.
#include "cli/plot_script.hpp"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/data_files.hpp"
#include "report/run_report.hpp"

namespace pstwin::cli {
namespace {

// The plotting script's exit status for "python3 runs but has no matplotlib".
constexpr int kNoMatplotlibStatus = 3;

}  // namespace

PlotOutcome run_plot_script(const std::vector<std::string>& arguments) {
  const std::string script = data_file("tools/pstwin_plot.py");
  if (!std::filesystem::exists(script)) return PlotOutcome::kNoScript;
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
  std::string command = shell_quote(python) + " " + shell_quote(script);
  for (const auto& argument : arguments) command += " " + shell_quote(argument);
  std::cout.flush();
  const int status = std::system(command.c_str());
  const int code = status == -1 ? 127 : (WIFEXITED(status) ? WEXITSTATUS(status) : 128);
  if (code == 0) return PlotOutcome::kDrawn;
  if (code == 127) return PlotOutcome::kNoPython;
  if (code == kNoMatplotlibStatus) return PlotOutcome::kNoMatplotlib;
  std::cerr << "pstwin: the plotting script failed (exit status " << code << "): " << command << "\n";
  return PlotOutcome::kFailed;
}

std::string plot_outcome_text(PlotOutcome outcome) {
  switch (outcome) {
    case PlotOutcome::kDrawn:
      return "plots drawn";
    case PlotOutcome::kNoScript:
      return data_file("tools/pstwin_plot.py") +
             " is missing (the binary's installation or source tree moved)";
    case PlotOutcome::kNoPython:
      return "python3 is not installed (Debian: apt-get install python3-matplotlib)";
    case PlotOutcome::kNoMatplotlib:
      return "python3's matplotlib is not installed (Debian: apt-get install python3-matplotlib; "
             "PSTWIN_PYTHON names another interpreter)";
    case PlotOutcome::kFailed:
      return "the plotting script failed";
  }
  return "unknown outcome";
}

int run_plot(const PlotOptions& options) {
  const std::filesystem::path results = std::filesystem::path(options.run_dir) / "results.json";
  if (!std::filesystem::exists(results))
    throw std::runtime_error(options.run_dir +
                             " holds no results.json: give the --out directory of `pstwin sim` "
                             "or `pstwin run`");
  std::vector<std::string> arguments = {"run", options.run_dir};
  if (!options.out_dir.empty()) arguments.insert(arguments.end(), {"--out", options.out_dir});
  if (options.quiet) arguments.emplace_back("--quiet");
  const PlotOutcome outcome = run_plot_script(arguments);
  if (outcome == PlotOutcome::kDrawn) return 0;
  if (outcome != PlotOutcome::kFailed)
    std::cerr << "pstwin plot: no plots: " << plot_outcome_text(outcome) << "\n";
  return 1;
}

}  // namespace pstwin::cli
