#include "sim_support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace pstwin::testing {

CommandResult run_shell(const std::string& command) {
  CommandResult result;
  const std::string full = "cd " PSTWIN_SOURCE_DIR " && (" + command + ") 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed for: " + command);
  std::array<char, 4096> buffer{};
  for (std::size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

CommandResult run_pstwin(const std::string& args) {
  return run_shell(std::string(PSTWIN_BINARY) + " " + args);
}

std::optional<ExploreFinding> first_finding(const std::string& explore_output) {
  std::smatch match;
  if (!std::regex_search(
          explore_output, match,
          std::regex("seed (\\d+): .*first \\[(\\w+)\\] ([^\\n]*)\\n  replay: (pstwin sim [^\\n]*)")))
    return std::nullopt;
  return ExploreFinding{match[1], match[2], match[3], match[4]};
}

CommandResult run_replay(const std::string& replay, const std::filesystem::path& out) {
  return run_shell(std::string(PSTWIN_BINARY) + replay.substr(std::string("pstwin").size()) + " -q --out " +
                   out.string());
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string without_sanitizer_notices(std::string text) {
#if defined(__SANITIZE_ADDRESS__)
  constexpr bool kAsan = true;
#elif defined(__has_feature)
  constexpr bool kAsan = __has_feature(address_sanitizer);
#else
  constexpr bool kAsan = false;
#endif
  if (!kAsan) return text;
  // The notice is three lines: "==PID==WARNING: ASan is ignoring requested
  // __asan_handle_no_return: ...", "False positive error reports may follow", "For details see ...".
  static const std::regex notice(
      R"(==[0-9]+==WARNING: ASan is ignoring requested __asan_handle_no_return[^\n]*\n)"
      R"(False positive error reports may follow\n)"
      R"(For details see [^\n]*\n)");
  return std::regex_replace(text, notice, "");
}

nlohmann::json read_json(const std::filesystem::path& path) {
  return nlohmann::json::parse(read_text(path));
}

std::uint64_t refused_from(const RunReport& report, const std::string& node, const std::string& peer) {
  const auto it = report.refused.find(node);
  if (it == report.refused.end()) return 0;
  const auto found = it->second.find(peer);
  return found == it->second.end() ? 0 : found->second;
}

std::string address_of(const std::vector<std::pair<std::string, std::string>>& nodes,
                       const std::string& label) {
  for (const auto& [name, address] : nodes)
    if (name == label) return address;
  ADD_FAILURE() << "no node " << label;
  return "";
}

std::string refusals_text(const RunReport& report) {
  std::string out;
  for (const auto& [node, peers] : report.refused)
    for (const auto& [peer, count] : peers) out += node + " <- " + peer + ": " + std::to_string(count) + "\n";
  return out;
}

std::string simulated_digest(const std::string& args, const std::filesystem::path& out) {
  const auto sim = run_pstwin("sim " + args + " -q --out " + out.string());
  EXPECT_EQ(sim.exit_code, 0) << sim.output;
  if (sim.exit_code != 0) return "";
  const std::string digest = read_json(out / "results.json").value("model_digest", "");
  EXPECT_FALSE(digest.empty()) << "pstwin sim " << args << " wrote no model_digest";
  return digest;
}

std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("pstwin-test-" + std::to_string(getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

ChildProcess::ChildProcess(const std::vector<std::string>& args, std::filesystem::path output,
                           const std::vector<std::string>& env)
    : output_(std::move(output)) {
  std::vector<std::string> argv_text{PSTWIN_BINARY};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<std::string> env_text = env;
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  // Scenario paths are relative: run from the source tree, as a user would.
  posix_spawn_file_actions_addchdir_np(&actions, PSTWIN_SOURCE_DIR);
  const int rc =
      posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), env.empty() ? environ : envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));
}

ChildProcess::~ChildProcess() {
  if (exit_code_) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

std::optional<int> ChildProcess::wait_until(std::chrono::steady_clock::time_point deadline) {
  while (!exit_code_) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_)
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    else if (std::chrono::steady_clock::now() >= deadline)
      return std::nullopt;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return exit_code_;
}

}  // namespace pstwin::testing
