// The one place that builds a node's protocol role, for every backend (the simulator, every node in one
// process, one node per process). What the roles of a process share is made here once from the
// scenario: the workload's partitions, the training model (with src/zeno's attacks) and the servers'
// update rule (ps/update_rule.hpp: sum, SGD with zeno.rule's combiner, or validators' sums).
// It lives in the topmost protocol layer because it is the only code that knows every role.
#pragma once

#include <memory>
#include <optional>

#include "core/runtime.hpp"
#include "ps/device.hpp"
#include "ps/host_groups.hpp"
#include "ps/ps_node.hpp"
#include "ps/role_options.hpp"
#include "ps/round_plan.hpp"
#include "ps/training.hpp"
#include "ps/update_rule.hpp"
#include "ps/workload.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::zeno {

class RobustTraining;

class JobRoles {
 public:
  // Throws ScenarioError naming the field when the scenario's model, rule or attack cannot be built.
  // `scenario` must outlive this object and every role it builds. `device` makes a worker's device
  // tensors with workload.device = "cuda": the real backends pass the CUDA one (cuda/cuda_tensors.hpp);
  // without it (the simulator) workers get an EmulatedDevice, whose copies the simulator charges, and
  // with ps.local_reduce = "nccl" form their hosts' groups in one EmulatedGroups of this job.
  // `mlp_step` runs a worker's MLP step on its GPU with workload.kind = "mlp" (the real backends pass
  // cuda::mlp_step_factory); without it (the simulator) the CPU computes the same step.
  explicit JobRoles(const Scenario& scenario, DeviceFactory device = {}, MlpStepFactory mlp_step = {});
  ~JobRoles();
  JobRoles(const JobRoles&) = delete;
  JobRoles& operator=(const JobRoles&) = delete;

  // The role `role` of rank `rank` (the scheduler ignores the rank) on `runtime`, registering with the
  // scheduler at `scheduler_address` (the scheduler's own: ""). A server's rank may be -1 (a real
  // node learns it from the scheduler). Validators need workload.kind = "mlp": ScenarioError otherwise.
  // A worker whose device cannot be used: DeviceError naming the worker and the failed call.
  std::unique_ptr<Node> make(Role role, int rank, Runtime& runtime, RunObserver& observer,
                             std::string scheduler_address) const;

  const SyntheticWorkload& workload() const { return workload_; }
  const JobShape& shape() const { return shape_; }
  const TrainingModel* training() const;  // null: synthetic workload
  const UpdateRule& update_rule() const { return *rule_; }

 private:
  const Scenario& scenario_;
  DeviceFactory device_;
  std::shared_ptr<EmulatedGroups> emulated_groups_;  // without `device_`
  SyntheticWorkload workload_;
  RoundPlan plan_;
  HostGroups groups_;
  JobShape shape_{workload_, plan_, groups_};
  // Each role's settings, built once: every node of a process shares the control plane's job fields.
  ControlOptions control_;
  ServerOptions server_;
  WorkerOptions worker_;
  std::unique_ptr<RobustTraining> training_;
  std::unique_ptr<GradientCombiner> combiner_;
  std::unique_ptr<UpdateRule> rule_;
};

}  // namespace pstwin::zeno
