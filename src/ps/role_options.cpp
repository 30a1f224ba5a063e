#include "ps/role_options.hpp"

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

ServerOptions server_options(const Scenario& scenario) {
  return ServerOptions{.aggregator = aggregator_options(scenario),
                       .load_balanced = scenario.lb.balancing == Balancing::kLb,
                       .servers = scenario.roles.servers,
                       .worker_aggregators = scenario.lb.worker_aggregators ? scenario.roles.workers : 0,
                       .intake = range_intake_options(scenario)};
}

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
      .host_reduce = host_reduce_options(scenario)};
}

}  // namespace pstwin
