// What the parameter server needs from a real model (workload.kind = "mlp"), as an interface: the
// model, its data and optimiser, and its evaluation. They live in src/train (train/ps_training.hpp
// implements it), a layer above the protocol. How a round's gradients are combined is the servers'
// update rule (ps/update_rule.hpp), not the model's. Every node derives the same initial model from the
// scenario seed, so servers start their keys and workers their replicas from identical bytes without a
// broadcast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace pstwin {

// One worker's source of gradients: its data shard and minibatch stream.
class GradientSource {
 public:
  virtual ~GradientSource() = default;
  // Writes round `round`'s update at `params` into `grad`: the next minibatch's mean-loss gradient
  // (train.local_steps > 1: the sum of that many local steps' gradients).
  virtual void step(std::uint32_t round, std::span<const float> params, std::span<float> grad) = 0;
  virtual double flops_per_step() const = 0;  // the simulator's compute cost of one step
};

class TrainingModel {
 public:
  virtual ~TrainingModel() = default;
  virtual std::span<const float> initial_parameters() const = 0;
  // Offset in floats of declared tensor `tensor` within the flat parameter buffer.
  virtual std::size_t tensor_offset(int tensor) const = 0;
  virtual std::unique_ptr<GradientSource> worker(int rank) const = 0;
  // SGD with momentum and weight decay on one slice of the model (its own velocity slice), at the
  // learning rate of round `iteration` (train.lr_schedule).
  virtual void apply(std::span<float> params, std::span<const float> grad, std::span<float> velocity,
                     std::uint32_t iteration) const = 0;
  // Fraction of the test set classified correctly with `params`.
  virtual double test_accuracy(std::span<const float> params) const = 0;
};

}  // namespace pstwin
