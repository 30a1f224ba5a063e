// Helpers for end-to-end tests that run the real pstwin binary.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/run_report.hpp"

namespace pstwin::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `pstwin ARGS` from the source directory (so scenarios/ paths work).
CommandResult run_pstwin(const std::string& args);
CommandResult run_shell(const std::string& command);
std::string read_text(const std::filesystem::path& path);
// `text` less AddressSanitizer's notice that it cannot follow an exception across the actor stacks
// SimGrid swaps ("ASan is ignoring requested __asan_handle_no_return ..."; SimGrid throws one into
// each actor it kills): it is the sanitizer's output, not pstwin's. An ASan error report is kept (and
// aborts the process anyway). Without ASan, `text` unchanged.
std::string without_sanitizer_notices(std::string text);
nlohmann::json read_json(const std::filesystem::path& path);
// The first failing seed `pstwin explore` printed: "seed N: ..., first [INVARIANT] DETAIL" and its
// "  replay: pstwin sim ..." line; nullopt if there is none.
struct ExploreFinding {
  std::string seed, invariant, detail, replay;
};
std::optional<ExploreFinding> first_finding(const std::string& explore_output);
// A printed replay command ("pstwin sim ..."), run as printed with this build's binary, writing to `out`.
CommandResult run_replay(const std::string& replay, const std::filesystem::path& out);
// The model_digest of `pstwin sim ARGS -q --out OUT` (ARGS: the scenario and its --set options); ""
// and a test failure when the simulation fails or has no digest.
std::string simulated_digest(const std::string& args, const std::filesystem::path& out);
// A fresh, empty directory under the build tree's temp area, removed at exit of the test process.
std::filesystem::path fresh_dir(const std::string& name);

// What `node` of a real run refused from `peer` ("node 11", "127.0.0.1"): RunReport::refused.
std::uint64_t refused_from(const RunReport& report, const std::string& node, const std::string& peer);
// The address of the node labelled `label` ("server 0") in run_local's on_started list; "" (and a
// test failure) if there is none.
std::string address_of(const std::vector<std::pair<std::string, std::string>>& nodes,
                       const std::string& label);
// Every refusal of the run, a line "NODE <- PEER: COUNT" each, for a failing assertion's message.
std::string refusals_text(const RunReport& report);

// `pstwin ARGS...` as a child process run from the source tree, stdout and stderr captured in
// `output`. `env` empty: it inherits this process's environment. SIGKILLed and reaped if it still
// runs when destroyed, so a failing test leaves no process behind.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& args, std::filesystem::path output,
               const std::vector<std::string>& env = {});
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The exit status (128 + signal if killed) once it ended before `deadline`; nullopt if it still runs.
  std::optional<int> wait_until(std::chrono::steady_clock::time_point deadline);
  std::string output() const { return read_text(output_); }
  const std::filesystem::path& output_path() const { return output_; }

 private:
  std::filesystem::path output_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

}  // namespace pstwin::testing
