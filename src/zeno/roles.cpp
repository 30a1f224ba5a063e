#include "zeno/roles.hpp"

#include "ps/scheduler.hpp"
#include "ps/server.hpp"
#include "ps/worker.hpp"
#include "zeno/robust_training.hpp"
#include "zeno/validator.hpp"

namespace pstwin::zeno {

JobRoles::JobRoles(const Scenario& scenario, DeviceFactory device)
    : scenario_(scenario), device_(std::move(device)), workload_(scenario), plan_(scenario, workload_) {
  const bool async = scenario.ps.mode == TrainingMode::kAsync;
  if (scenario.workload.kind == WorkloadKind::kMlp) training_ = std::make_unique<RobustTraining>(scenario);
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

std::unique_ptr<Node> JobRoles::make(Role role, int rank, const NodeContext& context) const {
  switch (role) {
    case Role::kScheduler:
      return std::make_unique<Scheduler>(context.runtime, scenario_, context.observer);
    case Role::kServer:
      return std::make_unique<Server>(context, rank, workload_, *rule_);
    case Role::kWorker: {
      std::unique_ptr<DeviceTensors> device;
      if (scenario_.workload.device == DeviceKind::kCuda) {
        try {
          device = device_ ? device_(workload_, rank) : std::make_unique<EmulatedDevice>(workload_, rank);
        } catch (const DeviceError& e) {
          throw DeviceError("worker " + std::to_string(rank) + ": workload.device = \"cuda\": " + e.what());
        }
      }
      return std::make_unique<Worker>(context, rank, workload_, training_.get(), std::move(device));
    }
    case Role::kValidator:
      if (!training_)
        throw ScenarioError("roles.validators: validators score real gradients; set workload.kind = \"mlp\"");
      return std::make_unique<Validator>(context, rank, workload_, training_->inner(), training_->rule());
  }
  throw ScenarioError("unknown role");
}

}  // namespace pstwin::zeno
