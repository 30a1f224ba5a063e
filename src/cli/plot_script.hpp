// tools/pstwin_plot.py run from the CLI (`pstwin sweep`'s plots, `pstwin plot`).
#pragma once

#include <string>
#include <vector>

namespace pstwin::cli {

enum class PlotOutcome {
  kDrawn,
  kNoScript,      // the source tree the binary was built from moved: no tools/pstwin_plot.py
  kNoPython,      // no python3 on PATH
  kNoMatplotlib,  // python3 runs, but without matplotlib
  kFailed,        // the script ran and failed (it printed why)
};

// Runs the plotting script with `arguments` (e.g. {"run", DIR}) under the first interpreter that
// has matplotlib: python3 on PATH, then /usr/bin/python3, or PSTWIN_PYTHON alone where it is set.
PlotOutcome run_plot_script(const std::vector<std::string>& arguments);

// What to tell the user about an outcome other than kDrawn, e.g. "python3's matplotlib is not
// installed (Debian: apt-get install python3-matplotlib)".
std::string plot_outcome_text(PlotOutcome outcome);

}  // namespace pstwin::cli
