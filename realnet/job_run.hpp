// `pstwin run`: a whole real job as local processes. Spawns one `pstwin node` process per node (the
// scheduler, the servers, the workers) on 127.0.0.1 with the BytePS/ps-lite environment, waits for
// them, and merges what each wrote with `--report` into one RunReport (backend "real").
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "realnet/job_parts.hpp"
#include "realnet/node_run.hpp"
#include "realnet/van.hpp"
#include "report/run_report.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::realnet {

// One child process as the launcher saw it.
struct ChildOutcome {
  std::string name;     // "scheduler", "server0", "worker1", ...
  int exit_code = -1;   // the exit status, 128 + signal if killed, -1 if it never ended on its own
  std::string failure;  // "" when it ended with status 0
};

struct JobRunOptions {
  std::string binary;                 // the pstwin executable to spawn ("" = /proc/self/exe)
  std::string scenario_path;          // passed to every node as --scenario
  std::vector<std::string> sets;      // FIELD=VALUE, passed to every node as --set
  std::optional<std::uint64_t> seed;  // `pstwin run --seed`: every node's scenario seed (and the replay's)
  std::string parts_dir;              // <role><rank>.json and <role><rank>.log go here
  bool netns = false;  // each scenario host in its own network namespace (realnet/netns_cluster.hpp)
  // With netns: faults.partitions that list hosts are made by the switch (NetnsCluster::cut), not by
  // the nodes' van layer (PSTWIN_PARTITIONS=kernel).
  bool kernel_partitions = false;
  // Non-empty: every node runs this command (a ps-lite or pstwin.torch application, looked up on PATH)
  // instead of `pstwin node`, with the same environment; the report then holds only whether every
  // process ended with status 0 (`completed`, `failure`).
  std::vector<std::string> command;
  Van van = default_van();                      // every node's transport (DMLC_PS_VAN_TYPE)
  bool encrypt = false;                         // PSTWIN_ENCRYPT=curve for every node (zmq van only)
  std::function<void(const std::string&)> log;  // progress lines; null: none
  // SIGINT/SIGTERM: run once every node is killed, before this process exits (a caller's scratch
  // files, which the exit would leave behind); null: nothing.
  std::function<void()> on_interrupt;
};

// Runs the job; never leaves a child running (nor, with `netns`, a namespace: NetnsCluster). Each node
// is its scenario host's (PSTWIN_HOST): nodes share staging memory only with nodes on their host. When a
// node fails or run.time_limit passes, the others are stopped with SIGTERM (SIGKILL after a grace
// period) so they report what they completed. SIGINT/SIGTERM to this process kill every child and then
// exit this process with status 128 + signal.
RunReport run_job(const Scenario& scenario, const JobRunOptions& options);

}  // namespace pstwin::realnet
