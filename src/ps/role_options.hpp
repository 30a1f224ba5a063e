// What each protocol role reads of the scenario, as plain values. The edge that holds the whole
// scenario (JobRoles in zeno/roles.cpp, the ps-lite facade) builds them with the *_options functions
// below, so a role's constructor names every setting it depends on, a role cannot start to depend on
// another field unnoticed, and a test builds a role from the few values it exercises.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/types.hpp"
#include "ps/host_groups.hpp"
#include "ps/round_plan.hpp"
#include "ps/workload.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

// The control plane every server, worker and validator shares (PsNode): registration, heartbeats.
struct ControlOptions {
  Seconds heartbeat_interval_s = 1;
  Seconds heartbeat_timeout_s = 10;
  Seconds connect_timeout_s = 10;
  // The fields a node registers with (scenario.hpp's job_fields): the scheduler refuses a node of
  // another job, naming the fields that differ. Shared: every node of a process has the same.
  std::shared_ptr<const std::vector<std::pair<std::string, std::string>>> job_fields =
      std::make_shared<const std::vector<std::pair<std::string, std::string>>>();
};

struct SchedulerOptions {
  ControlOptions control;
  int servers = 1;
  int workers = 1;
  int validators = 0;
  int backup_workers = 0;                 // ps.backup_workers: the job ends when all but these are done
  bool continues_on_worker_loss = false;  // ps.on_worker_loss = "continue"
};

// A server's store and update rule, and a worker aggregator's (lb.worker_aggregators).
struct AggregatorOptions {
  bool sync = true;  // ps.mode
  int validators = 0;
  int backup_workers = 0;
  bool continues_on_worker_loss = false;
  int max_staleness = 0;              // async: 0 = unbounded
  double sum_bandwidth_Bps = 5e9;     // workload.sum_bandwidth: what a sum costs on an engine lane
  double copy_bandwidth_Bps = 5e9;    // staging.copy_bandwidth: an async snapshot's copy
  bool duplicate_candidates = false;  // zeno.duplicate_candidates (a fault of the forwarding)
  int engine_threads = 4;             // ps.server_engine_threads: lanes of the "engine" executor
};

// ps.balancing = "lb": how requests wait for their iteration's decision (RangeIntake).
struct RangeIntakeOptions {
  int servers = 1;
  std::vector<std::uint64_t> missing_measurements;  // lb.missing_measurements: a fault to inject
};

// ps.local_reduce: the reduce between the workers of one host (HostReduce, DeviceReduce for "nccl").
struct HostReduceOptions {
  bool device_group = false;               // "nccl": the host's GPUs as one group (DeviceReduce)
  std::string staging_job;                 // staging.job: names the host's shared buffers
  double intra_host_bandwidth_Bps = 16e9;  // cluster.intra_host_bandwidth
  double copy_bandwidth_Bps = 5e9;         // staging.copy_bandwidth
  double pcie_bandwidth_Bps = 12e9;        // cluster.pcie_bandwidth: "nccl"'s root copies
  int workers = 1;
  int iterations = 1;
  bool phantom = false;  // workload.payload = "phantom": sizes only
};

struct ServerOptions {
  AggregatorOptions aggregator;
  bool load_balanced = false;  // ps.balancing = "lb"
  int servers = 1;
  int worker_aggregators = 0;  // workers that also aggregate (lb.worker_aggregators), 0: none
  int workers = 1;
  bool equal_shares = false;  // lb.server_equal_shares, with load_balanced and workers' NICs that differ
  RangeIntakeOptions intake;
};

struct WorkerOptions {
  int servers = 1;
  int workers = 1;
  int iterations = 1;
  bool load_balanced = false;        // ps.balancing = "lb"
  bool aggregates = false;           // lb.worker_aggregators: this worker aggregates a range too
  int scheduling_credit = 0;         // ps.scheduling_credit, 0: no limit
  bool fused = false;                // ps.push_pull = "fused"
  Seconds compute_s = 0.01;          // workload.compute: a synthetic iteration's compute
  Seconds compute_jitter_s = 0;      // perturbation.compute_jitter: drawn per iteration
  double forward_share = 1.0 / 3;    // workload.forward_share (layer-wise chain)
  bool layerwise = false;            // workload.layerwise
  bool phantom = false;              // workload.payload = "phantom"
  int eval_every = 0;                // train.eval_every (training only)
  double pcie_bandwidth_Bps = 12e9;  // cluster.pcie_bandwidth: device copies
  bool staging = true;               // staging.enabled: pushes are copied into host-shared memory
  std::string staging_job;           // staging.job
  StagingNaming staging_naming = StagingNaming::kPerRank;
  double copy_bandwidth_Bps = 5e9;  // staging.copy_bandwidth
  AggregatorOptions aggregator;     // with `aggregates`
  RangeIntakeOptions intake;        // with `aggregates`
  HostReduceOptions host_reduce;    // with ps.local_reduce, on a host with other workers
  // workload.kind = "mlp" on "cuda": the bytes a round's training step copies between host and GPU
  // (parameters and batch in, gradient out, per local step), charged at pcie_bandwidth_Bps.
  std::uint64_t step_copy_bytes = 0;
};

// What every role of a job shares, built once per process from the scenario (JobRoles) and outliving
// its roles: the partitions, who pushes which tensor in each round, which workers share a host.
struct JobShape {
  const SyntheticWorkload& workload;
  const RoundPlan& plan;     // train.participation / train.drop_rate
  const HostGroups& groups;  // ps.local_reduce
};

ControlOptions control_options(const Scenario& scenario);
SchedulerOptions scheduler_options(const Scenario& scenario);
AggregatorOptions aggregator_options(const Scenario& scenario);
RangeIntakeOptions range_intake_options(const Scenario& scenario);
HostReduceOptions host_reduce_options(const Scenario& scenario);
ServerOptions server_options(const Scenario& scenario);
WorkerOptions worker_options(const Scenario& scenario);

}  // namespace pstwin
