// The MLP of [train] behind the parameter server's TrainingModel interface (src/ps/training.hpp):
// every process builds one from the scenario alone and gets the same bytes.
//   initial model: Mlp::initialize from RandomStream(seed, "train.init") (not Runtime::random, which
//                  mixes in node addresses that differ between backends);
//   shards:        make_shards over the training labels with the scenario seed;
//   batches:       worker r draws from RandomStream(seed, "train.batches", r).
// The data sets load on first use (servers never load them), once per process.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ps/device.hpp"
#include "ps/training.hpp"
#include "scenario/scenario.hpp"
#include "train/mlp.hpp"
#include "train/sgd.hpp"
#include "train/shard_trainer.hpp"
#include "train/sharding.hpp"
#include "train/worker_momentum.hpp"

namespace pstwin::train {

class MlpTraining final : public TrainingModel {
 public:
  // Throws ScenarioError naming the field when the scenario cannot be trained (e.g. train.batch
  // larger than a Dirichlet shard). `device_step` (real backends, workload.device = "cuda") gives each
  // worker's honest gradient step its device; without it workers compute on the CPU.
  explicit MlpTraining(const Scenario& scenario, MlpStepFactory device_step = {});

  std::span<const float> initial_parameters() const override { return initial_; }
  std::size_t tensor_offset(int tensor) const override;
  std::unique_ptr<GradientSource> worker(int rank) const override;
  void apply(std::span<float> params, std::span<const float> grad, std::span<float> velocity,
             std::uint32_t iteration) const override;
  double test_accuracy(std::span<const float> params) const override;

  const Mlp& model() const { return model_; }
  // train.learning_rate under train.lr_schedule at round `iteration`.
  float learning_rate(std::uint32_t iteration) const;
  // The training set and its shards (workers', then roles.validators held-out ones).
  const ImageDataset& train_data() const;
  const ShardSet& shards() const;
  // A trainer over worker `rank`'s shard, drawing batches from `batches` (src/zeno's attackers and
  // validators build their own: label maps, extra streams).
  std::unique_ptr<ShardTrainer> trainer(std::span<const std::uint32_t> shard, std::size_t batch,
                                        RandomStream batches) const;
  // train.worker_momentum: a fresh momentum buffer for one sender of updates (a worker, an attacker's
  // shadow, a validator's reference), or none when the servers keep the momentum.
  std::optional<WorkerMomentum> worker_momentum() const;

 private:
  const Scenario& scenario_;
  MlpStepFactory device_step_;
  Mlp model_;
  SgdConfig sgd_;
  SgdConfig server_sgd_;  // sgd_, or plain SGD when the workers keep the momentum
  std::vector<float> initial_;
  mutable std::once_flag shards_once_;
  mutable std::optional<ShardSet> shards_;
};

// The training model a scenario asks for, or null for the synthetic workload.
std::unique_ptr<TrainingModel> make_training(const Scenario& scenario);

}  // namespace pstwin::train
