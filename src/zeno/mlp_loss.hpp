// Zeno's f_r on the real model: the MLP's mean cross-entropy on one fixed validation batch.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/idx_dataset.hpp"
#include "train/mlp.hpp"

namespace pstwin::zeno {

// Holds its batch and buffers, so a call allocates nothing. Pass it to a LossFn as std::ref(loss):
// it is not copied, and `model` must outlive it.
class MlpBatchLoss {
 public:
  // The samples of `data` named by `indices` (a validator's batch), copied once.
  MlpBatchLoss(const train::Mlp& model, const train::ImageDataset& data,
               std::span<const std::uint32_t> indices);

  double operator()(std::span<const float> params);
  std::size_t batch_size() const { return y_.size(); }

 private:
  const train::Mlp& model_;
  std::vector<float> x_;
  std::vector<std::uint8_t> y_;
  train::MlpWorkspace workspace_;
  std::vector<float> gradient_;  // loss_and_gradient always writes one; unused here
};

}  // namespace pstwin::zeno
