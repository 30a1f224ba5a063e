// The processes a launcher (`pstwin run`, `pstwin launch`) starts for a job's nodes, and the
// launcher's own SIGINT/SIGTERM: what both launchers share.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "realnet/node_run.hpp"

namespace pstwin::realnet {

// One spawned process: SIGKILLed and reaped when it goes out of scope still running. It also dies
// with the launcher (PR_SET_PDEATHSIG), should the launcher itself be SIGKILLed.
class JobChild {
 public:
  struct Spec {
    std::string name;               // "scheduler", "server0", "worker1", ...
    std::vector<std::string> argv;  // argv[0] a path, or a name looked up in PATH
    std::vector<std::string> env;   // NAME=VALUE: its whole environment
    std::string stdout_path;        // created or truncated
    std::string stderr_path;        // "" = stdout's file
    int netns_fd = -1;              // >= 0: it enters that network namespace before it runs
    int stdin_fd = -1;              // >= 0: its stdin (else it inherits the launcher's)
  };
  explicit JobChild(Spec spec);
  ~JobChild() { kill(); }
  JobChild(const JobChild&) = delete;
  JobChild& operator=(const JobChild&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  std::optional<int> exit_code() const { return exit_code_; }

  // True once the child has ended (and been reaped).
  bool poll();
  // Asks a running child to stop: `pstwin node` then ends as a failed node does and writes its report.
  void terminate();
  void kill();
  bool killed() const { return killed_; }

 private:
  std::string name_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  bool killed_ = false;
};

// SIGINT and SIGTERM to the launcher, caught for the launcher's loop to act on; the previous
// dispositions come back when this goes. SIGPIPE is ignored meanwhile: a child that is gone must
// not kill the launcher writing to its stdin. One at a time.
class LauncherSignals {
 public:
  LauncherSignals();
  ~LauncherSignals();
  LauncherSignals(const LauncherSignals&) = delete;
  LauncherSignals& operator=(const LauncherSignals&) = delete;

  // The signal caught, 0 if none.
  int caught() const;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_pipe_ {};
};

// How long nodes told to stop get to write their reports before they are killed: a node notices
// within 50 ms, then joins its threads (ZeroMQ lingers up to 1 s) and, in an mlp run, worker 0
// evaluates its model.
inline constexpr auto kStopGrace = std::chrono::seconds(10);

// A free TCP port on 127.0.0.1: bind port 0, read what the kernel chose, close.
int free_local_port();

// "300 s", "0.5 s": a limit as the user wrote it, without std::to_string's six decimals.
std::string format_seconds(double seconds);

// This process's environment for a launcher's children, NAME=VALUE each, without the BytePS/ps-lite
// variables (DMLC_*, BYTEPS_*, PS_*), PSTWIN_JOB_TOKEN and PSTWIN_ENCRYPT: the launcher gives each
// node the job's own.
std::vector<std::string> environment_without_job_variables();

// How a launcher watches its children (`pstwin run`, `pstwin launch`).
struct ChildWatch {
  std::function<std::optional<NodePart>(std::size_t)> report;  // child i's report, once it ended
  std::function<std::string(std::size_t)> label;               // "worker1", "worker1 on gpu3"
  std::function<std::string(std::size_t)> log_path;            // what a failure says to see
  // Asks child i to stop, so it reports what it completed.
  std::function<void(std::size_t)> ask_to_stop;
  // Called each turn (null: nothing); a non-empty result is a failure that stops the job.
  std::function<std::string()> each_turn;
  std::function<void(const std::string&)> log;
  // SIGINT/SIGTERM caught: kills everything and exits; does not return.
  std::function<void()> on_signal;
};

// Logs the time limit, then waits until every child ended, one failed or `timeout_s` (run.time_limit,
// wall clock) passed since `start`; then asks the others to stop and kills those still running kStopGrace
// later. A child failed: an exit status but 0, unless 1 with a completed report (it saw violations) or it
// crashed by faults.crashes (the scheduler decides what follows). Returns the job's failure, "" if none.
std::string watch_children(std::vector<std::unique_ptr<JobChild>>& children, const LauncherSignals& signals,
                           std::chrono::steady_clock::time_point start, double timeout_s,
                           const ChildWatch& watch);

// The report a node wrote with --report to `path`; nullopt if there is none or it does not parse.
std::optional<NodePart> read_part_file(const std::string& path);

}  // namespace pstwin::realnet
