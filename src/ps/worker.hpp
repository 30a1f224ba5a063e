// A worker's iteration driver: per iteration, compute (modelled, or a real gradient step), then for
// every partition in priority order stage it in host-shared memory (copy-in, one executor step) and
// hand it to its KvClient (kv_client.hpp: credit, routing, push-out as a second step whose payload is a
// live view of the staging buffer, read when the transport sends it, as BytePS's zero-copy push does);
// the iteration ends when every partition's aggregate is pulled. With ps.balancing = "lb" an iteration
// starts only once its decision is here.
// lb.worker_aggregators: the worker also aggregates the range of keys a decision gives it, with the
// server's Aggregator behind a RangeIntake; its own pushes to that range go to itself.
// With a TrainingModel (workload.kind = "mlp") the compute step is a real gradient step on the
// worker's replica, pushes carry gradient slices and pulls overwrite the replica's slices.
// With ps.local_reduce a worker that shares its host stages each partition for the host's root
// through HostReduce (host_reduce.hpp) instead of pushing it; the root pushes the host's sum. With
// "nccl" the host's devices reduce and broadcast as one group instead (device_reduce.hpp).
// With DeviceTensors (workload.device = "cuda", ps/device.hpp) the values live on the device: the copy
// step produces them there and copies them device -> host into the staging buffer, and every pulled
// aggregate is copied host -> device on the copy lane before the pull counts as done.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "ps/aggregator.hpp"
#include "ps/balance.hpp"
#include "ps/device.hpp"
#include "ps/device_reduce.hpp"
#include "ps/host_reduce.hpp"
#include "ps/kv_client.hpp"
#include "ps/lb_intake.hpp"
#include "ps/ps_node.hpp"
#include "ps/round_plan.hpp"
#include "ps/training.hpp"
#include "ps/workload.hpp"

namespace pstwin {

class Worker final : public PsNode {
 public:
  // `training` (may be null: synthetic values) must outlive the worker. `device`: where the synthetic
  // values live with workload.device = "cuda" (null: host memory, no device copies).
  // `job` must outlive the worker.
  Worker(NodeContext context, int rank, WorkerOptions options, const JobShape& job,
         const TrainingModel* training = nullptr, std::unique_ptr<DeviceTensors> device = nullptr);

 private:
  void on_ready() override;
  void on_app_message(Message message) override;
  std::string describe_app_state() const override;

  void start_iteration(Seconds started);
  void on_decision(const Message& message);
  void serve(Message request);  // worker aggregators: a push or pull of our range
  // lb: the send pool's weights follow the bytes `decision` sends to each destination.
  void follow_decision_weights(const LbDecision& decision);
  ComputeCost iteration_cost();
  // workload.layerwise: the per-tensor forward/backward chain on the compute lane.
  void start_layerwise_compute();
  void try_forward();
  void run_backward(int tensor);
  void stage_tensor(int tensor);
  void on_model_received();
  void stage_and_push(const PartitionSpec& partition);
  void pull_only();  // a round this worker sits out (train.participation): only the model
  void on_pull_response(Message message);
  void apply_pull(Message message);  // the pulled aggregate is where it belongs: count it
  // Device work on a lane: an exception it throws (a CUDA error) fails the run instead of `done`.
  void submit_device_work(Executor& stage, std::string_view label, ComputeCost cost,
                          std::function<void()> work, std::function<void()> done);
  Seconds pcie_seconds(std::uint64_t bytes) const;
  // A compute step on compute_stage_. The training step's `work` (the MLP's math, on the CPU or its GPU)
  // may throw: that fails the run naming this worker instead of escaping a lane thread.
  void submit_compute(std::string_view label, ComputeCost cost, std::function<void()> work,
                      std::function<void()> done);
  std::shared_ptr<ByteBuffer> staging_buffer(const PartitionSpec& partition);
  // What this worker pushes for `partition`: synthetic values, or its gradient slice.
  void fill_push(const PartitionSpec& partition, std::uint32_t iteration, std::span<float> out) const;
  std::size_t element_offset(const PartitionSpec& partition) const;  // in the flat model
  void snapshot_model();
  // train.drop_rate: this round's unsent tensors stay on the replica as one local SGD step of their
  // own gradient slice, for one round only (ZenoPS's error reset).
  void keep_unsent_steps(std::uint32_t round);

  const WorkerOptions options_;
  const SyntheticWorkload& workload_;
  const TrainingModel* training_;
  std::unique_ptr<DeviceTensors> device_;      // workload.device = "cuda" only
  std::unique_ptr<GradientSource> gradients_;  // training only
  const RoundPlan& plan_;                      // train.participation / train.drop_rate
  std::vector<float> params_, grad_;           // training only: the replica and its gradient
  Seconds training_start_ = 0;
  Executor& compute_stage_;
  Executor& copy_stage_;
  // ps.balancing = "lb": decisions by iteration (null otherwise), read by the KV client's routing.
  std::unique_ptr<DecisionBook> decisions_;
  KvClient kv_;
  std::map<std::uint64_t, std::shared_ptr<ByteBuffer>> staging_;  // key -> mapped staging region
  std::uint32_t iteration_ = 0;
  // workload.layerwise only: tensor t's partitions in push order, its pulls not yet in, its share of
  // the compute, and where the chain is (the iteration computing and the next tensor to forward).
  std::vector<std::vector<const PartitionSpec*>> tensor_parts_;
  std::vector<std::size_t> tensor_pulls_left_;
  std::vector<double> tensor_share_;
  ComputeCost layer_cost_;  // the whole iteration's, drawn when its forward starts
  std::uint32_t compute_iteration_ = 0;
  std::size_t next_forward_ = 0;
  bool forwarding_ = false;
  Seconds iteration_start_ = 0;
  std::size_t pulls_outstanding_ = 0;
  std::size_t pushes_unacked_ = 0;
  // ps.balancing = "lb": this node's monitor, and whether the next iteration waits for its decision
  // (the wait counts in the iteration's time).
  BandwidthMonitor monitor_;
  bool awaiting_decision_ = false;
  std::uint32_t weights_version_ = 0;       // lb: the decision version the send and receive weights follow
  std::unique_ptr<Aggregator> aggregator_;  // lb.worker_aggregators only
  std::unique_ptr<RangeIntake> intake_;
  const HostGroups& groups_;
  std::unique_ptr<HostReduce> host_reduce_;      // ps.local_reduce, on a host with other workers only
  std::unique_ptr<DeviceReduce> device_reduce_;  // the same with "nccl" (after device_: uses it)
};

}  // namespace pstwin
