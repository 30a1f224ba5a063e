#include "train/worker_momentum.hpp"

#include <stdexcept>
#include <string>

namespace pstwin::train {

void WorkerMomentum::apply(std::span<const float> params, std::span<float> grad) {
  if (params.size() != grad.size())
    throw std::invalid_argument("worker momentum: " + std::to_string(params.size()) + " parameters, " +
                                std::to_string(grad.size()) + " gradient values");
  if (buffer_.empty()) buffer_.assign(grad.size(), 0.0f);
  if (buffer_.size() != grad.size())
    throw std::invalid_argument("worker momentum: the model changed size from " +
                                std::to_string(buffer_.size()) + " to " + std::to_string(grad.size()));
  for (std::size_t i = 0; i < grad.size(); ++i) {
    buffer_[i] = momentum_ * buffer_[i] + (grad[i] + weight_decay_ * params[i]);
    grad[i] = buffer_[i];
  }
}

}  // namespace pstwin::train
