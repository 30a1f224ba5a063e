#include "train/local_sgd.hpp"

#include <algorithm>

namespace pstwin::train {

void LocalSgd::run(ShardTrainer& trainer, std::span<const float> params, std::span<float> grad, float lr) {
  if (steps_ <= 1) {
    trainer.step(params, grad);
    return;
  }
  x_.assign(params.begin(), params.end());
  g_.resize(params.size());
  std::fill(grad.begin(), grad.end(), 0.0f);
  for (int h = 0; h < steps_; ++h) {
    trainer.step(x_, g_);
    for (std::size_t i = 0; i < x_.size(); ++i) {
      grad[i] += g_[i];
      x_[i] -= lr * g_[i];
    }
  }
}

}  // namespace pstwin::train
