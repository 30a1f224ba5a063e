// A worker: per iteration, compute (modelled), then for every partition in priority order stage it
// in host-shared memory (copy-in, one executor step), push it (push-out, a second step: the payload
// is a live view of the staging buffer, read when the transport sends it, as BytePS's zero-copy
// push does), pull the aggregate once the push is acknowledged; the iteration ends when every
// partition is pulled (ps.push_pull = fused: one push_pull request per partition, whose reply carries
// the aggregate). With ps.balancing = "lb" each partition goes to the server the decision for the
// iteration names, an iteration starts only once its decision is here, and the credit counts per
// server. At most ps.scheduling_credit partitions are pushed and unacknowledged at once.
// lb.worker_aggregators: the worker also aggregates the range of keys a decision gives it, with the
// server's Aggregator behind a RangeIntake; its own pushes to that range go to itself.
// With a TrainingModel (workload.kind = "mlp") the compute step is a real gradient step on the
// worker's replica, pushes carry gradient slices and pulls overwrite the replica's slices.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "ps/aggregator.hpp"
#include "ps/balance.hpp"
#include "ps/lb_intake.hpp"
#include "ps/ps_node.hpp"
#include "ps/round_plan.hpp"
#include "ps/training.hpp"
#include "ps/workload.hpp"

namespace pstwin {

class Worker final : public PsNode {
 public:
  // `training` (may be null: synthetic values) must outlive the worker.
  Worker(NodeContext context, int rank, const SyntheticWorkload& workload,
         const TrainingModel* training = nullptr);

 private:
  void on_ready() override;
  void on_app_message(Message message) override;
  std::string describe_app_state() const override;

  void start_iteration(Seconds started);
  void on_decision(const Message& message);
  int destination(const PartitionSpec& partition) const;  // aggregator slot: by hash or by decision
  void serve(Message request);                            // worker aggregators: a push or pull of our range
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
  void request_pull(const PartitionSpec& partition);  // a pull without a push (RoundPlan)
  void pull_only();  // a round this worker sits out (train.participation): only the model
  void ready_to_push(const PartitionSpec& partition, Payload payload);
  void dispatch_pushes();
  void push(const PartitionSpec& partition, Payload payload);
  void release_push_credit(NodeId server);
  void on_push_ack(const Message& message);
  void on_pull_response(Message message);
  std::shared_ptr<ByteBuffer> staging_buffer(const PartitionSpec& partition);
  // What this worker pushes for `partition`: synthetic values, or its gradient slice.
  void fill_push(const PartitionSpec& partition, std::uint32_t iteration, std::span<float> out) const;
  std::size_t element_offset(const PartitionSpec& partition) const;  // in the flat model
  void snapshot_model();
  // train.drop_rate: this round's unsent tensors stay on the replica as one local SGD step of their
  // own gradient slice, for one round only (ZenoPS's error reset).
  void keep_unsent_steps(std::uint32_t round);

  const SyntheticWorkload& workload_;
  const TrainingModel* training_;
  std::unique_ptr<GradientSource> gradients_;  // training only
  RoundPlan plan_;                             // train.participation / train.drop_rate
  std::vector<float> params_, grad_;           // training only: the replica and its gradient
  Seconds training_start_ = 0;
  Executor& compute_stage_;
  Executor& copy_stage_;
  Executor& push_stage_;
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
  // Staged partitions waiting for credit, highest priority first (ByteScheduler's credit-based
  // preemption): bounding bytes in flight keeps pull requests from queueing behind the whole model.
  // Equal priorities leave in staging order (a sequence number, never the key).
  std::map<std::pair<std::int32_t, std::uint64_t>, std::pair<const PartitionSpec*, Payload>> ready_;
  std::uint64_t staged_sequence_ = 0;
  // Synthetic pushes (no staging, no training) are made when the credit releases them, not when
  // staged: by staged sequence, the iteration whose values they carry. Filling all of them at once
  // wrote a whole model of cold buffers per iteration (about 7 % of a 1 MiB loopback run's CPU).
  std::map<std::uint64_t, std::uint32_t> fill_on_release_;
  int in_flight_ = 0;
  std::map<int, int> in_flight_to_;  // per aggregator slot (the credit's unit with ps.balancing = "lb")
  // ps.balancing = "lb": decisions by iteration, this node's monitor, and whether the next iteration
  // waits for its decision (the wait counts in the iteration's time).
  std::unique_ptr<DecisionBook> decisions_;
  BandwidthMonitor monitor_;
  bool awaiting_decision_ = false;
  std::uint32_t weights_version_ = 0;       // lb: the decision version the send and receive weights follow
  std::unique_ptr<Aggregator> aggregator_;  // lb.worker_aggregators only
  std::unique_ptr<RangeIntake> intake_;
};

}  // namespace pstwin
