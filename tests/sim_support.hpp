// Helpers for end-to-end tests that run the real pstwin binary.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace pstwin::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `pstwin ARGS` from the source directory (so scenarios/ paths work).
CommandResult run_pstwin(const std::string& args);
CommandResult run_shell(const std::string& command);
std::string read_text(const std::filesystem::path& path);
nlohmann::json read_json(const std::filesystem::path& path);
// A fresh, empty directory under the build tree's temp area, removed at exit of the test process.
std::filesystem::path fresh_dir(const std::string& name);

}  // namespace pstwin::testing
