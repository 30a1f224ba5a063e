#include "train/shard_trainer.hpp"

#include <fmt/core.h>
#include <stdexcept>

namespace pstwin::train {

ShardTrainer::ShardTrainer(const Mlp& model, const ImageDataset& data, std::vector<std::uint32_t> shard,
                           std::size_t batch_size, RandomStream batches,
                           std::unique_ptr<DeviceMlpStep> device)
    : model_(model),
      data_(data),
      sampler_(std::move(shard), batch_size, batches),
      workspace_(model.workspace(sampler_.batch_size())),
      x_(sampler_.batch_size() * data.features()),
      y_(sampler_.batch_size()),
      device_(std::move(device)) {
  if (data.features() != model.inputs()) {
    throw std::invalid_argument(
        fmt::format("ShardTrainer: the data set has {} features per sample, the model "
                    "takes {}",
                    data.features(), model.inputs()));
  }
}

void ShardTrainer::set_label_map(std::span<const std::uint8_t> label_map) {
  if (label_map.size() != model_.classes()) {
    throw std::invalid_argument(fmt::format("label map has {} entries, the model has {} classes",
                                            label_map.size(), model_.classes()));
  }
  for (std::size_t c = 0; c < label_map.size(); ++c) {
    if (label_map[c] >= model_.classes()) {
      throw std::invalid_argument(
          fmt::format("label map[{}] = {} is not a class 0..{}", c, label_map[c], model_.classes() - 1));
    }
  }
  label_map_.assign(label_map.begin(), label_map.end());
}

double ShardTrainer::step(std::span<const float> params, std::span<float> grad) {
  const auto indices = sampler_.next();
  data_.gather(indices, x_, y_);
  if (!label_map_.empty()) {
    for (auto& y : y_) y = label_map_[y];
  }
  if (device_) return device_->loss_and_gradient(params, x_, y_, grad);
  return model_.loss_and_gradient(params, x_, y_, grad, workspace_);
}

double ShardTrainer::flops_per_step() const {
  return model_.train_flops_per_sample() * static_cast<double>(sampler_.batch_size());
}

}  // namespace pstwin::train
