#include "ps/training.hpp"

#include <algorithm>

#include "core/float_sum.hpp"

namespace pstwin {

void TrainingModel::combine(std::uint64_t /*key*/, std::span<const std::span<const float>> gradients,
                            std::span<float> out) const {
  std::fill(out.begin(), out.end(), 0.0f);
  for (const auto& gradient : gradients) sum_into(out, gradient);
  const auto count = static_cast<float>(gradients.size());
  for (auto& value : out) value /= count;
}

}  // namespace pstwin
