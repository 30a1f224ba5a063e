// Runs ONE node (scheduler, server or worker) of a real job in this process, as `pstwin node`
// does: configured by a NodeEnv (the BytePS/ps-lite environment) on top of a scenario.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "realnet/node_env.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::realnet {

struct NodeRunOptions {
  // Receives every log line (and the PS_VERBOSE progress lines); null: stderr.
  std::function<void(std::string_view)> log;
};

struct NodeRunResult {
  int exit_code = 1;    // 0 success, 1 failure or invariant violation (bad configuration throws)
  std::string summary;  // one line: role, rank, id, iterations, checks, violations
  std::string details;  // the failure and the first violations, one per line; "" when clean
};

// Throws NodeEnvError/ScenarioError for bad configuration and BindError when the address is taken;
// everything that goes wrong once the node runs is reported in the result instead.
NodeRunResult run_node(const Scenario& scenario, const NodeEnv& env, const NodeRunOptions& options = {});

}  // namespace pstwin::realnet
