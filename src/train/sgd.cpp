#include "train/sgd.hpp"

#include <fmt/core.h>
#include <cmath>
#include <stdexcept>

namespace pstwin::train {

void validate(const SgdConfig& config) {
  if (!std::isfinite(config.learning_rate) || config.learning_rate <= 0) {
    throw std::invalid_argument(
        fmt::format("sgd learning_rate = {}: must be a finite number > 0 (e.g. 0.05)", config.learning_rate));
  }
  if (!std::isfinite(config.momentum) || config.momentum < 0 || config.momentum >= 1) {
    throw std::invalid_argument(
        fmt::format("sgd momentum = {}: must be in [0, 1) (0.9 is usual, 0 turns it off)", config.momentum));
  }
  if (!std::isfinite(config.weight_decay) || config.weight_decay < 0) {
    throw std::invalid_argument(
        fmt::format("sgd weight_decay = {}: must be a finite number >= 0 (e.g. 1e-4, 0 turns it off)",
                    config.weight_decay));
  }
  if (config.nesterov && config.momentum == 0) {
    throw std::invalid_argument("sgd nesterov = true needs momentum > 0");
  }
}

void sgd_step(std::span<float> params, std::span<const float> grad, std::span<float> velocity,
              const SgdConfig& config) {
  if (grad.size() != params.size() || velocity.size() != params.size()) {
    throw std::invalid_argument(fmt::format("sgd_step: {} parameters, {} gradient values, {} velocity values",
                                            params.size(), grad.size(), velocity.size()));
  }
  validate(config);
  const float lr = config.learning_rate;
  const float mu = config.momentum;
  const float wd = config.weight_decay;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const float g = grad[i] + wd * params[i];
    const float v = mu * velocity[i] + g;
    velocity[i] = v;
    params[i] -= lr * (config.nesterov ? g + mu * v : v);
  }
}

}  // namespace pstwin::train
