// What one training worker does per iteration: draw the next minibatch of its shard and compute
// the gradient of the model's mean loss on it at the parameters it was given (pulled from the PS).
// The data set and model are shared read-only between workers; each trainer owns its batch stream
// and buffers, so a step allocates nothing.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/random.hpp"
#include "ps/device.hpp"
#include "train/idx_dataset.hpp"
#include "train/mlp.hpp"
#include "train/sharding.hpp"

namespace pstwin::train {

class ShardTrainer {
 public:
  // `model` and `data` must outlive the trainer. `batches` orders the shard's minibatches. With
  // `device` (workload.device = "cuda" on a real backend) the step's math runs there, else on the CPU.
  ShardTrainer(const Mlp& model, const ImageDataset& data, std::vector<std::uint32_t> shard,
               std::size_t batch_size, RandomStream batches, std::unique_ptr<DeviceMlpStep> device = nullptr);

  // Writes the next minibatch's gradient at `params` into `grad` and returns the batch's mean loss.
  double step(std::span<const float> params, std::span<float> grad);

  // Relabels every sample before the gradient (label_map[y] replaces y), e.g. a label-flip attack
  // maps y to classes - 1 - y. Every entry must be a valid class.
  void set_label_map(std::span<const std::uint8_t> label_map);

  // The simulator's compute cost of one step: the model's training FLOPs per sample x batch size.
  double flops_per_step() const;
  std::size_t batch_size() const { return sampler_.batch_size(); }
  std::uint64_t epoch() const { return sampler_.epoch(); }

 private:
  const Mlp& model_;
  const ImageDataset& data_;
  BatchSampler sampler_;
  MlpWorkspace workspace_;
  std::vector<float> x_;
  std::vector<std::uint8_t> y_;
  std::vector<std::uint8_t> label_map_;    // empty: labels as they are
  std::unique_ptr<DeviceMlpStep> device_;  // null: the CPU computes
};

}  // namespace pstwin::train
