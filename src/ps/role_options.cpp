#include "ps/role_options.hpp"

#include <algorithm>

namespace pstwin {

ControlOptions control_options(const Scenario& scenario) {
  return ControlOptions{
      .heartbeat_interval_s = scenario.ps.heartbeat_interval_s,
      .heartbeat_timeout_s = scenario.ps.heartbeat_timeout_s,
      .connect_timeout_s = scenario.ps.connect_timeout_s,
      .job_fields =
          std::make_shared<const std::vector<std::pair<std::string, std::string>>>(job_fields(scenario))};
}

SchedulerOptions scheduler_options(const Scenario& scenario) {
  return SchedulerOptions{.control = control_options(scenario),
                          .servers = scenario.roles.servers,
                          .workers = scenario.roles.workers,
                          .validators = scenario.roles.validators,
                          .backup_workers = scenario.ps.backup_workers,
                          .continues_on_worker_loss = scenario.ps.continues_on_worker_loss()};
}

AggregatorOptions aggregator_options(const Scenario& scenario) {
  return AggregatorOptions{.sync = scenario.ps.mode == TrainingMode::kSync,
                           .validators = scenario.roles.validators,
                           .backup_workers = scenario.ps.backup_workers,
                           .continues_on_worker_loss = scenario.ps.continues_on_worker_loss(),
                           .max_staleness = scenario.ps.max_staleness,
                           .sum_bandwidth_Bps = scenario.workload.sum_bandwidth_Bps,
                           .copy_bandwidth_Bps = scenario.staging.copy_bandwidth_Bps,
                           .duplicate_candidates = scenario.zeno.duplicate_candidates,
                           .engine_threads = scenario.ps.server_engine_threads};
}

RangeIntakeOptions range_intake_options(const Scenario& scenario) {
  return RangeIntakeOptions{.servers = scenario.roles.servers,
                            .missing_measurements = scenario.lb.missing_measurements};
}

HostReduceOptions host_reduce_options(const Scenario& scenario) {
  return HostReduceOptions{.device_group = scenario.ps.local_reduce == LocalReduce::kNccl,
                           .staging_job = scenario.staging.job,
                           .intra_host_bandwidth_Bps = scenario.cluster.intra_host_bandwidth_Bps,
                           .copy_bandwidth_Bps = scenario.staging.copy_bandwidth_Bps,
                           .pcie_bandwidth_Bps = scenario.cluster.pcie_bandwidth_Bps,
                           .workers = scenario.roles.workers,
                           .iterations = scenario.workload.iterations,
                           .phantom = scenario.workload.payload == PayloadMode::kPhantom};
}

namespace {

// Whether the workers' NICs differ in bandwidth. Only then does a link's sharing give some workers'
// pushes less of a server than others' (LV08 by route penalty, TCP by round trip): with equal NICs
// the shares come out equal anyway, and holding them there only takes the room to catch up after a
// stall (lb_hetero_netns on the epoll van: +6.6 % over its bound held, +5.4 % free, medians of 5).
bool workers_differ(const Scenario& scenario) {
  const double first = scenario.host_link(scenario.worker_host_name(0)).bandwidth_Bps;
  for (int w = 1; w < scenario.roles.workers; ++w)
    if (scenario.host_link(scenario.worker_host_name(w)).bandwidth_Bps != first) return true;
  return false;
}

}  // namespace

ServerOptions server_options(const Scenario& scenario) {
  return ServerOptions{.aggregator = aggregator_options(scenario),
                       .load_balanced = scenario.lb.balancing == Balancing::kLb,
                       .servers = scenario.roles.servers,
                       .worker_aggregators = scenario.lb.worker_aggregators ? scenario.roles.workers : 0,
                       .workers = scenario.roles.workers,
                       .equal_shares = scenario.lb.balancing == Balancing::kLb &&
                                       scenario.lb.server_equal_shares && workers_differ(scenario),
                       .intake = range_intake_options(scenario)};
}

namespace {

// A GPU MLP step (cuda/cuda_mlp.cpp) copies the parameters and the batch (pixels as float32, labels as
// bytes) host -> device, and the gradient and the per-sample losses back, every local step.
std::uint64_t step_copy_bytes(const Scenario& scenario) {
  if (scenario.workload.kind != WorkloadKind::kMlp || scenario.workload.device != DeviceKind::kCuda) return 0;
  std::uint64_t parameters = 0;
  for (const auto bytes : scenario.declared_tensor_bytes()) parameters += bytes;
  const auto batch = static_cast<std::uint64_t>(scenario.train.batch);
  const auto inputs = static_cast<std::uint64_t>(scenario.train.layers.front());
  const std::uint64_t step = 2 * parameters + batch * (inputs * sizeof(float) + 1 + sizeof(float));
  return static_cast<std::uint64_t>(std::max(1, scenario.train.local_steps)) * step;
}

}  // namespace

WorkerOptions worker_options(const Scenario& scenario) {
  return WorkerOptions{
      .servers = scenario.roles.servers,
      .workers = scenario.roles.workers,
      .iterations = scenario.workload.iterations,
      .load_balanced = scenario.lb.balancing == Balancing::kLb,
      .aggregates = scenario.lb.balancing == Balancing::kLb && scenario.lb.worker_aggregators,
      .scheduling_credit = scenario.ps.scheduling_credit,
      .fused = scenario.ps.push_pull == PushPullMode::kFused,
      .compute_s = scenario.workload.compute_s,
      .compute_jitter_s = scenario.perturbation.compute_jitter_s,
      .forward_share = scenario.workload.forward_share,
      .layerwise = scenario.workload.layerwise,
      .phantom = scenario.workload.payload == PayloadMode::kPhantom,
      .eval_every = scenario.train.eval_every,
      .pcie_bandwidth_Bps = scenario.cluster.pcie_bandwidth_Bps,
      .staging = scenario.staging.enabled,
      .staging_job = scenario.staging.job,
      .staging_naming = scenario.staging.naming,
      .copy_bandwidth_Bps = scenario.staging.copy_bandwidth_Bps,
      .aggregator = aggregator_options(scenario),
      .intake = range_intake_options(scenario),
      .host_reduce = host_reduce_options(scenario),
      .step_copy_bytes = step_copy_bytes(scenario)};
}

}  // namespace pstwin
