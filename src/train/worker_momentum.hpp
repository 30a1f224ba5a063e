// Worker-side momentum (train.worker_momentum; Karimireddy et al. 2021, "Learning from History for
// Byzantine Robust Optimization"): each worker keeps its own momentum buffer and pushes it instead of
// its raw gradient,
//   m = momentum * m + (g + weight_decay * x)        (PyTorch's form, dampening 0; m starts at 0)
// and the servers apply plain SGD (no momentum, no weight decay) to the mean of the pushed m. The mean
// of the workers' momenta is the servers' momentum of the mean gradient, so an undefended run learns
// the same model; but honest momenta vary far less between workers than gradients, which takes the
// room out of attacks hidden in that variance (ALIE).
#pragma once

#include <span>
#include <vector>

namespace pstwin::train {

class WorkerMomentum {
 public:
  WorkerMomentum(float momentum, float weight_decay) : momentum_(momentum), weight_decay_(weight_decay) {}

  // Replaces `grad` (taken at `params`) with the updated momentum buffer.
  void apply(std::span<const float> params, std::span<float> grad);

 private:
  float momentum_;
  float weight_decay_;
  std::vector<float> buffer_;  // empty until the first step
};

}  // namespace pstwin::train
