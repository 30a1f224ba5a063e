// Runs ONE node (scheduler, server or worker) of a real job in this process, as `pstwin node`
// does: configured by a NodeEnv (the BytePS/ps-lite environment) on top of a scenario.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ps/control.hpp"
#include "ps/invariants.hpp"
#include "realnet/node_env.hpp"
#include "report/run_report.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::realnet {

struct NodeRunOptions {
  // Receives every log line (and the PS_VERBOSE progress lines); null: stderr.
  std::function<void(std::string_view)> log;
};

// What one node contributes to a whole job's report (`pstwin node --report`, merged by `pstwin run`).
struct NodePart {
  Role role = Role::kScheduler;
  int rank = -1;        // -1: never joined
  NodeId id = kNoNode;  // kNoNode: never joined
  std::string address;  // where this node's ROUTER listened
  bool completed = false;
  std::string failure;                // "" when completed
  bool crashed = false;               // stopped by faults.crashes (what a kill -9 is for the job)
  std::optional<FaultCounts> faults;  // [faults] or ps.resend: what it injected and resent
  std::uint64_t checked = 0;
  std::uint64_t violation_count = 0;
  std::vector<Violation> violations;
  InvariantTallies tallies;
  struct Iteration {
    std::uint32_t index = 0;
    double start_s = 0;
    double end_s = 0;
  };
  std::vector<Iteration> iterations;             // workers: wall times of each iteration
  std::map<std::uint64_t, std::string> digests;  // key -> digest of its final value (see RunRecorder)
  std::vector<NodeInfo> nodes;                   // the scheduler: the node table
  std::uint64_t bytes_sent = 0;                  // wire bytes (header + payload) of its messages
  std::uint64_t bytes_received = 0;
  CrossHostTraffic cross_host;   // of what it sent
  std::uint64_t messages = 0;    // messages it sent
  double epoch_s = 0;            // zero of its span times on the host's steady clock (LocalHost::epoch_s)
  std::vector<TraceSpan> trace;  // its spans when output.trace is on
  std::optional<AccuracyCurve> accuracy;  // worker 0 of an mlp run, evaluated after its run
  std::uint64_t trace_dropped = 0;
  std::optional<BalancingReport> balancing;     // the scheduler of a ps.balancing = "lb" run
  std::optional<StalenessSummary> staleness;    // an aggregating node of an async run with ps.max_staleness
  std::optional<SelectionSummary> selection;    // a server under a robust zeno.rule: its keys' judgements
  std::optional<ValidationSummary> validation;  // a ZenoPS validator: its decisions on its workers
  // What it refused (malformed, forged, unauthenticated, over the limits), per peer: "node 9", or the
  // host of connections that never proved membership (LoopRuntime::refusals).
  std::map<std::string, std::uint64_t> refused;
  // Which job it was part of, for `pstwin merge` to refuse another job's report: the scheduler's
  // address (DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT) and the scenario it ran, resolved (resolved_toml).
  std::string scheduler;
  std::string scenario;
};

struct NodeRunResult {
  int exit_code = 1;    // 0 success, 1 failure or invariant violation, 128 + signal when SIGINT or SIGTERM
                        // stopped it, 2 when the scheduler refused it (bad configuration otherwise throws)
  std::string summary;  // one line: role, rank, id, iterations, checks, violations
  std::string details;  // the failure and the first violations, one per line; "" when clean
  NodePart part;
};

// Throws NodeEnvError/ScenarioError for bad configuration and BindError when the address is taken;
// everything that goes wrong once the node runs is reported in the result instead.
NodeRunResult run_node(const Scenario& scenario, const NodeEnv& env, const NodeRunOptions& options = {});

}  // namespace pstwin::realnet
