// ZenoPS's local SGD (train.local_steps = H): a worker takes H plain SGD steps on its own replica
// from the pulled model and pushes the SUM of the H gradients, i.e. its model delta divided by -lr.
// The servers apply that like one gradient (momentum and weight decay there), so one round moves
// the model by about what H local steps did; H = 1 is one gradient, bit for bit.
#pragma once

#include <span>
#include <vector>

#include "train/shard_trainer.hpp"

namespace pstwin::train {

class LocalSgd {
 public:
  explicit LocalSgd(int steps) : steps_(steps) {}

  // H steps of `trainer` from `params` at learning rate `lr`; the summed gradient into `grad`.
  void run(ShardTrainer& trainer, std::span<const float> params, std::span<float> grad, float lr);
  int steps() const { return steps_; }

 private:
  int steps_;
  std::vector<float> x_, g_;  // the local replica and one step's gradient (H > 1 only)
};

}  // namespace pstwin::train
