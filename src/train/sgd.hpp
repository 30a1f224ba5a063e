// SGD with momentum and weight decay (PyTorch's torch.optim.SGD, dampening 0), as a pure function of
// (parameters, gradient, momentum state, hyper-parameters) over any slice of the flat model, so a PS
// server can apply it to one key's tensor and a worker to the whole model with the same result:
//   g' = g + weight_decay * p
//   v  = momentum * v + g'           (v starts at 0)
//   p  = p - lr * (nesterov ? g' + momentum * v : v)
#pragma once

#include <span>

namespace pstwin::train {

struct SgdConfig {
  float learning_rate = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

// Throws std::invalid_argument naming the field: learning_rate must be > 0, momentum in [0, 1),
// weight_decay >= 0, all finite; nesterov needs momentum > 0.
void validate(const SgdConfig& config);

// Updates `params` and `velocity` in place. All three spans must have the same size.
void sgd_step(std::span<float> params, std::span<const float> grad, std::span<float> velocity,
              const SgdConfig& config);

}  // namespace pstwin::train
