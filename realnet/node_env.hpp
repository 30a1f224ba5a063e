// The BytePS/ps-lite environment of one `pstwin node` process (DMLC_ROLE, DMLC_PS_ROOT_URI, ...),
// parsed and validated without touching the process environment, so it can be unit-tested.
// docs/ENVIRONMENT.md lists every variable, its default and what is not supported.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/types.hpp"
#include "realnet/van.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::realnet {

// A bad or missing variable; what() names the variable, the value and a fix. It derives from
// ScenarioError so the CLI maps it to exit status 2 (bad configuration) like any scenario problem.
class NodeEnvError : public ScenarioError {
 public:
  using ScenarioError::ScenarioError;
};

struct NodeEnv {
  Role role =
      Role::kScheduler;    // DMLC_ROLE (required); DMLC_WORKER_TYPE=validator makes a worker a validator
  std::string root_uri;    // DMLC_PS_ROOT_URI (required): the scheduler's address
  int root_port = 0;       // DMLC_PS_ROOT_PORT (required)
  int num_workers = 0;     // DMLC_NUM_WORKER (required)
  int num_servers = 0;     // DMLC_NUM_SERVER (required)
  int worker_id = -1;      // DMLC_WORKER_ID (required for workers, ignored otherwise)
  int num_validators = 0;  // DMLC_NUM_VALIDATOR (ZenoPS; default 0)
  int validator_id = -1;   // DMLC_VALIDATOR_ID (required with DMLC_ROLE=worker DMLC_WORKER_TYPE=validator)
  std::string node_host = "127.0.0.1";           // DMLC_NODE_HOST: bound and advertised by servers/workers
  bool node_host_given = false;                  // ... set, not the default (node_address.hpp resolves it)
  std::string interface;                         // DMLC_INTERFACE: advertise this interface's address
  int node_port = 0;                             // DMLC_NODE_PORT: servers/workers listen on it; 0: any
  std::optional<std::uint64_t> partition_bytes;  // BYTEPS_PARTITION_BYTES
  std::optional<bool> enable_async;              // BYTEPS_ENABLE_ASYNC
  std::optional<int> server_engine_threads;      // BYTEPS_SERVER_ENGINE_THREAD
  bool force_distributed = false;                // BYTEPS_FORCE_DISTRIBUTED (accepted, no effect)
  int verbose = 0;                    // PS_VERBOSE: 0, 1 or 2, raised by BYTEPS_LOG_LEVEL (see docs)
  std::string log_level = "WARNING";  // BYTEPS_LOG_LEVEL, upper-cased
  Van van = default_van();            // DMLC_PS_VAN_TYPE: zmq, epoll or ucx (DMLC_ENABLE_RDMA=1: ucx)
  double nic_rate_Bps = 0;            // PSTWIN_NIC_RATE (bytes/s): the epoll van paces to shares of it
  bool nic_rate_auto = false;         // PSTWIN_NIC_RATE=auto: read from the kernel at start (nic_rate.hpp)
  bool kernel_pacing = false;         // PSTWIN_PACING=kernel: SO_MAX_PACING_RATE instead of the van's own
  // PSTWIN_HOST: the host this node is on, for what is local to a host (shared-memory staging): nodes
  // of one job with equal hosts share it. `pstwin run` sets each node's scenario host; "" (unset):
  // this machine's host name, so hand-launched nodes share exactly when they share a machine.
  std::string host;
  // PSTWIN_JOB_START: the job's start on the steady clock, the zero of every [faults] window (`pstwin
  // run` sets it, so every node injects on the job's clock); unset: this node's own start.
  std::optional<double> job_start_s;
  // PSTWIN_PARTITIONS=kernel: partitions of hosts are made by the switch (`pstwin run --netns
  // --kernel-partitions`), not by this node; "van" (default): by the node.
  bool kernel_partitions = false;
  // PSTWIN_JOB_TOKEN: the job's secret; every connection between its nodes proves it
  // (realnet/job_auth.hpp). "": the node runs unauthenticated (and says so).
  std::string job_token;
  // PSTWIN_ENCRYPT=curve: the ZeroMQ van encrypts every connection with CURVE keys derived from
  // job_token (refused without a token or on another van); "none" or unset: plain TCP.
  bool encrypt = false;

  std::string scheduler_address() const { return root_uri + ":" + std::to_string(root_port); }
  // Where this node binds: the scheduler on the root address, others on node_host, on DMLC_NODE_PORT or
  // an ephemeral port.
  std::string bind_address() const;
  // Scenario overrides (dotted path, value) for what the environment sets; they go on top of the
  // scenario file and below --set.
  std::vector<std::pair<std::string, std::string>> scenario_overrides() const;
};

// What a launcher must set beyond the variables every node needs.
struct NodeEnvRules {
  // `pstwin node` workers name their rank (DMLC_WORKER_ID); a ps-lite application's workers may leave
  // it to the scheduler, as ps-lite does (worker_id -1 then).
  bool worker_id_required = true;
};

NodeEnv parse_node_env(const std::map<std::string, std::string>& env, NodeEnvRules rules = {});

// The process environment, every variable, for parse_node_env and check_env_names.
std::map<std::string, std::string> process_environment();
// Of `environment`, the variables parse_node_env reads.
std::map<std::string, std::string> node_variables(const std::map<std::string, std::string>& environment);

// The variables parse_node_env reads, for collecting them from the process environment.
const std::vector<std::string>& node_env_variables();

// The rest of the environment's DMLC_*, BYTEPS_*, PS_* and PSTWIN_* variables, which parse_node_env
// does not read (docs/ENVIRONMENT.md). A near miss of a variable pstwin knows (DMLC_PS_VAN_TYP)
// throws NodeEnvError naming it; one of the variables listed as not supported yet, or any other of
// these families, comes back as a warning line: it is ignored.
std::vector<std::string> check_env_names(const std::map<std::string, std::string>& environment);

}  // namespace pstwin::realnet
