#include "realnet/job_children.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "realnet/job_parts.hpp"

extern char** environ;

namespace pstwin::realnet {
namespace {

volatile sig_atomic_t g_signal = 0;
extern "C" void on_launcher_signal(int sig) {
  g_signal = sig;
}

// argv[0] as execve needs it: a name without '/' looked up in PATH here, before the fork (execvp
// is not async-signal-safe); not found: left as it is, and the child's exec fails with 127.
std::string executable_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (std::size_t from = 0; from <= dirs.size();) {
    const auto to = std::min(dirs.find(':', from), dirs.size());
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(from, to - from)) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    from = to + 1;
  }
  return name;
}

// The last non-empty line of a log, trimmed.
std::string last_log_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) last = line;
  }
  return last;
}

}  // namespace

JobChild::JobChild(Spec spec) : name_(std::move(spec.name)) {
  std::vector<std::string> argv_text = std::move(spec.argv);
  argv_text.at(0) = executable_path(argv_text.at(0));
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : spec.env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string& err_path = spec.stderr_path.empty() ? spec.stdout_path : spec.stderr_path;
  const bool own_err = !spec.stderr_path.empty();
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    // Only async-signal-safe calls from here to execve.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    if (spec.stdin_fd >= 0) ::dup2(spec.stdin_fd, STDIN_FILENO);
    const int out = ::open(spec.stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out >= 0) ::dup2(out, STDOUT_FILENO);
    const int err = own_err ? ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : out;
    if (err >= 0) ::dup2(err, STDERR_FILENO);
    if (spec.netns_fd >= 0 && ::setns(spec.netns_fd, CLONE_NEWNET) != 0) ::_exit(126);
    ::execve(argv[0], argv.data(), envp.data());
    constexpr std::string_view kCannot = "pstwin: cannot execute (not found, or not executable): ";
    [[maybe_unused]] auto written = ::write(STDERR_FILENO, kCannot.data(), kCannot.size());
    written = ::write(STDERR_FILENO, argv[0], std::strlen(argv[0]));
    written = ::write(STDERR_FILENO, "\n", 1);
    ::_exit(127);
  }
}

bool JobChild::poll() {
  if (exit_code_) return true;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  }
  return false;
}

void JobChild::terminate() {
  if (!poll() && pid_ > 0) ::kill(pid_, SIGTERM);
}

void JobChild::kill() {
  if (exit_code_ || pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_code_ = 128 + SIGKILL;
  killed_ = true;
}

LauncherSignals::LauncherSignals() {
  struct sigaction action {};
  action.sa_handler = on_launcher_signal;
  sigemptyset(&action.sa_mask);
  g_signal = 0;
  ::sigaction(SIGINT, &action, &old_int_);
  ::sigaction(SIGTERM, &action, &old_term_);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
}

LauncherSignals::~LauncherSignals() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
}

int LauncherSignals::caught() const {
  return g_signal;
}

std::vector<std::string> environment_without_job_variables() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.starts_with("DMLC_") || entry.starts_with("BYTEPS_") || entry.starts_with("PS_") ||
        entry.starts_with("PSTWIN_JOB_TOKEN=") || entry.starts_with("PSTWIN_ENCRYPT="))
      continue;
    env.push_back(entry);
  }
  return env;
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) throw std::runtime_error(std::string("cannot pick a free port: ") + std::strerror(error));
  return ntohs(addr.sin_port);
}

std::string format_seconds(double seconds) {
  std::ostringstream out;
  out << seconds << " s";
  return out.str();
}

std::string watch_children(std::vector<std::unique_ptr<JobChild>>& children, const LauncherSignals& signals,
                           std::chrono::steady_clock::time_point start, double timeout_s,
                           const ChildWatch& watch) {
  using Clock = std::chrono::steady_clock;
  watch.log("time limit " + format_seconds(timeout_s) + " (run.time_limit)");
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::string failure;
  // The job ends early: the nodes still running are told to stop, so each writes what it completed
  // (iterations, checks) and results.json has it; one that does not stop in time is killed.
  auto stop_all = [&] {
    for (std::size_t i = 0; i < children.size(); ++i)
      if (!children[i]->poll()) watch.ask_to_stop(i);
    const auto until = Clock::now() + kStopGrace;
    while (signals.caught() == 0 && Clock::now() < until &&
           !std::ranges::all_of(children, [](const auto& child) { return child->poll(); }))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (auto& child : children) child->kill();
  };
  for (;;) {
    if (signals.caught() != 0) watch.on_signal();
    if (watch.each_turn) failure = watch.each_turn();
    if (!failure.empty()) {
      watch.log(failure + ": stopping every node");
      stop_all();
      return failure;
    }
    // Past the limit a node's own (a little later: it started later) is no failure of its own.
    const bool late = Clock::now() >= deadline;
    bool all_done = true;
    for (std::size_t i = 0; i < children.size(); ++i) {
      auto& child = *children[i];
      if (!child.poll()) {
        all_done = false;
        continue;
      }
      const int code = *child.exit_code();
      if (code == 0 || child.killed() || !failure.empty() || late) continue;
      const auto part = watch.report(i);
      if (code == 1 && part && part->completed) continue;
      if (part && part->crashed) continue;
      // Its own words name the node at fault: the scheduler that exits first on a heartbeat timeout
      // names the silent node, a node the scheduler ended names the one that failed. Without a
      // report, the last line of its log says why (a remote shell that could not connect).
      const std::string said =
          part && !part->failure.empty() ? part->failure : last_log_line(watch.log_path(i));
      failure = watch.label(i) + " failed with exit status " + std::to_string(code) +
                (said.empty() ? "" : ": " + said) + " (see " + watch.log_path(i) + ")";
      watch.log(failure + ": stopping every node");
    }
    if (!failure.empty()) {
      stop_all();
      return failure;
    }
    if (all_done) return "";
    if (late) {
      failure = "run.time_limit of " + format_seconds(timeout_s) +
                " (wall clock) reached before every node ended; the nodes were stopped";
      watch.log(failure);
      stop_all();
      return failure;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::optional<NodePart> read_part_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    return part_from_json(nlohmann::json::parse(in));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace pstwin::realnet
