// Files the binary reads besides its input: the default scenario and the plotting script. An installed
// binary finds them under <prefix>/share/pstwin (relative to itself, so the prefix can move); one run
// from its build directory finds them in the source tree it was built from.
#pragma once

#include <string>
#include <string_view>

namespace pstwin::cli {

// The path of `relative` ("scenarios/quickstart.toml", "tools/pstwin_plot.py"): under the installed
// data directory when it is there, else in the source tree.
std::string data_file(std::string_view relative);

}  // namespace pstwin::cli
