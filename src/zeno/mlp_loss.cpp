#include "zeno/mlp_loss.hpp"

#include <stdexcept>

namespace pstwin::zeno {

MlpBatchLoss::MlpBatchLoss(const train::Mlp& model, const train::ImageDataset& data,
                           std::span<const std::uint32_t> indices)
    : model_(model),
      x_(indices.size() * data.features()),
      y_(indices.size()),
      workspace_(model.workspace(indices.size())),
      gradient_(model.parameter_count()) {
  if (indices.empty())
    throw std::invalid_argument("zeno validation batch: no samples: pass at least one index");
  data.gather(indices, x_, y_);
}

double MlpBatchLoss::operator()(std::span<const float> params) {
  return model_.loss_and_gradient(params, x_, y_, gradient_, workspace_);
}

}  // namespace pstwin::zeno
