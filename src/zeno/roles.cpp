#include "zeno/roles.hpp"

#include "ps/scheduler.hpp"
#include "ps/server.hpp"
#include "ps/worker.hpp"
#include "zeno/robust_training.hpp"
#include "zeno/validator.hpp"

namespace pstwin::zeno {
namespace {

ValidatorOptions validator_options(const Scenario& scenario) {
  return ValidatorOptions{.sync = scenario.ps.mode == TrainingMode::kSync,
                          .validators = scenario.roles.validators,
                          .workers = scenario.roles.workers,
                          .iterations = scenario.workload.iterations,
                          .seed = scenario.seed,
                          .batch = scenario.zeno.validator_batch,
                          .local_steps = scenario.zeno.local_steps,
                          .worker_local_steps = scenario.train.local_steps,
                          .refresh_every = scenario.zeno.refresh_every};
}

}  // namespace

JobRoles::JobRoles(const Scenario& scenario, DeviceFactory device, MlpStepFactory mlp_step)
    : scenario_(scenario),
      device_(std::move(device)),
      emulated_groups_(device_ ? nullptr : std::make_shared<EmulatedGroups>()),
      workload_(scenario),
      plan_(scenario, workload_),
      groups_(scenario),
      control_(control_options(scenario)),
      server_(server_options(scenario)),
      worker_(worker_options(scenario)) {
  const bool async = scenario.ps.mode == TrainingMode::kAsync;
  if (scenario.workload.kind == WorkloadKind::kMlp) {
    if (scenario.workload.device != DeviceKind::kCuda) mlp_step = {};
    training_ = std::make_unique<RobustTraining>(scenario, std::move(mlp_step));
  }
  if (!training_) {
    rule_ = std::make_unique<SumRule>();
  } else if (scenario.roles.validators > 0) {
    rule_ = std::make_unique<ValidatedRule>(*training_, workload_, async);
  } else {
    combiner_ = std::make_unique<RobustCombiner>(scenario);
    rule_ = std::make_unique<SgdRule>(*training_, workload_, plan_, *combiner_, async);
  }
}

JobRoles::~JobRoles() = default;

const TrainingModel* JobRoles::training() const {
  return training_.get();
}

std::unique_ptr<Node> JobRoles::make(Role role, int rank, Runtime& runtime, RunObserver& observer,
                                     std::string scheduler_address) const {
  const auto context = [&] { return NodeContext{runtime, observer, std::move(scheduler_address), control_}; };
  switch (role) {
    case Role::kScheduler: {
      std::unique_ptr<LoadBalancer> balancer;
      if (scenario_.lb.balancing == Balancing::kLb)
        balancer = std::make_unique<LoadBalancer>(scenario_, workload_.partitions());
      auto options = scheduler_options(scenario_);
      options.control = control_;
      return std::make_unique<Scheduler>(runtime, std::move(options), observer, std::move(balancer));
    }
    case Role::kServer:
      return std::make_unique<Server>(context(), rank, server_, shape_, *rule_);
    case Role::kWorker: {
      std::unique_ptr<DeviceTensors> device;
      // The MLP's device is its training step's (RobustTraining); device tensors are the synthetic one's.
      if (scenario_.workload.device == DeviceKind::kCuda && !training_) {
        try {
          device = device_ ? device_(workload_, rank)
                           : std::make_unique<EmulatedDevice>(workload_, rank, emulated_groups_);
        } catch (const DeviceError& e) {
          throw DeviceError("worker " + std::to_string(rank) + ": workload.device = \"cuda\": " + e.what());
        }
      }
      return std::make_unique<Worker>(context(), rank, worker_, shape_, training_.get(), std::move(device));
    }
    case Role::kValidator:
      if (!training_)
        throw ScenarioError("roles.validators: validators score real gradients; set workload.kind = \"mlp\"");
      return std::make_unique<Validator>(context(), rank, validator_options(scenario_), shape_,
                                         training_->inner(), training_->rule());
  }
  throw ScenarioError("unknown role");
}

}  // namespace pstwin::zeno
