// `pstwin launch --hostfile FILE SCENARIO`: a whole real job on the hosts a hostfile lists, each
// node started through a remote shell command (ssh by default), as BytePS's launcher does. The
// launcher decides every node's role and host, sends each node its environment (DMLC_*, the job's
// secret PSTWIN_JOB_TOKEN) and the resolved scenario on its stdin, never on a command line, and
// reads each node's report back from its stdout; docs/ENVIRONMENT.md, "pstwin launch".
#pragma once

#include <cstddef>
#include <functional>
#include <istream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "realnet/launch_inputs.hpp"
#include "realnet/node_run.hpp"
#include "realnet/van.hpp"
#include "report/run_report.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::realnet {

// One node of the job and where it runs.
struct LaunchNode {
  std::string name;  // "scheduler", "server0", "worker1", "validator0": its report and log files
  Role role = Role::kScheduler;
  int rank = 0;
  std::size_t host = 0;  // index into the hosts
};

// The scheduler on the first host (it takes no slot); then the servers, the workers and the
// validators dealt round-robin over the hosts in hostfile order, one cycle continuing from role to
// role, a full host skipped. Throws LaunchError when the slots cannot hold the scenario's nodes.
std::vector<LaunchNode> place_nodes(const Scenario& scenario, const std::vector<LaunchHost>& hosts);

// A node's report on its stdout: the line "pstwin-report BYTES", then the report's JSON, so other
// output around it (the summary line, a remote shell's notices) does no harm.
std::string framed_report(const NodePart& part);
// The last framed report in `output`; nullopt if there is none or it does not parse.
std::optional<NodePart> report_from_output(std::string_view output);

struct JobLaunchOptions {
  std::vector<LaunchHost> hosts;
  // Words split at blanks; "{host}" in a word becomes the host's name; without any "{host}" the name is
  // appended as the last word. The node's command (remote_binary node --launched) follows.
  std::string rsh = "ssh -o BatchMode=yes {host}";
  std::string remote_binary;  // the pstwin path on every host; "" = this binary's own path
  int port = 0;               // the scheduler's port on the first host; 0 = one free on this machine
  std::string parts_dir;      // <name>.json (reports), <name>.log (stderr), <name>.out (stdout)
  Van van = default_van();
  bool encrypt = false;                         // PSTWIN_ENCRYPT=curve for every node (zmq van only)
  std::function<void(const std::string&)> log;  // progress lines; null: none
};

// The words that start `node` on `host`: the remote shell command, then the node's command. Throws
// LaunchError for an empty command or a binary path a remote shell would interpret.
std::vector<std::string> remote_command(const JobLaunchOptions& options, const LaunchHost& host);

// Runs the job and merges the nodes' reports (as `pstwin run` does; also written to parts_dir, so
// `pstwin merge` reads them again). A node that fails, or run.time_limit passing, stops every node:
// its stdin is closed, then it is killed after a grace period. SIGINT/SIGTERM kill every remote shell
// (whose nodes see their stdin end) and exit with status 128 + signal.
RunReport launch_job(const Scenario& scenario, const JobLaunchOptions& options);

}  // namespace pstwin::realnet
