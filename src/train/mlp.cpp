#include "train/mlp.hpp"

#include <fmt/core.h>
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

namespace pstwin::train {

namespace {

using ColMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::Matrix<float, Eigen::Dynamic, 1>;

// Eigen's GEMM splits the inner dimension into blocks sized from the CPU's caches, and the block
// size changes the order of float additions. Fixed sizes make gradients bit-identical on every
// host, not just on one (both backends and every node must agree). Set once, before any product.
void fix_eigen_blocking() {
  static std::once_flag once;
  std::call_once(once, [] { Eigen::setCpuCacheSizes(32 * 1024, 1024 * 1024, 8 * 1024 * 1024); });
}

auto as_index(std::size_t n) {
  return static_cast<Eigen::Index>(n);
}

// log(sum(exp(z))), shifted by the maximum for range. Scalar and in index order on purpose: Eigen's
// vectorised reductions peel by address, so their rounding would depend on where a buffer lies.
float log_sum_exp(std::span<const float> z) {
  const float top = *std::max_element(z.begin(), z.end());
  float sum = 0;
  for (const float v : z) sum += std::exp(v - top);
  return top + std::log(sum);
}

}  // namespace

MlpWorkspace::MlpWorkspace(const std::vector<std::size_t>& layers, std::size_t max_batch)
    : max_batch_(max_batch) {
  std::size_t widest = 0;
  for (std::size_t l = 1; l < layers.size(); ++l) {
    activations_.emplace_back(layers[l] * max_batch);
    widest = std::max(widest, layers[l]);
  }
  delta_a_.resize(widest * max_batch);
  delta_b_.resize(widest * max_batch);
}

Mlp::Mlp(std::vector<std::size_t> layers) : layers_(std::move(layers)) {
  if (layers_.size() < 2) {
    throw std::invalid_argument(
        fmt::format("mlp layers: {} size(s) given; need at least the input size and the number of classes "
                    "(e.g. [784, 256, 128, 10])",
                    layers_.size()));
  }
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l] == 0 || layers_[l] > (std::size_t{1} << 24)) {
      throw std::invalid_argument(
          fmt::format("mlp layers[{}] = {}: each layer size must be between 1 and 2^24", l, layers_[l]));
    }
  }
  for (std::size_t l = 1; l < layers_.size(); ++l) {
    const int layer = static_cast<int>(l);
    tensors_.push_back({fmt::format("W{}", l), layer, parameter_count_, layers_[l], layers_[l - 1]});
    parameter_count_ += tensors_.back().size();
    tensors_.push_back({fmt::format("b{}", l), layer, parameter_count_, layers_[l], 1});
    parameter_count_ += tensors_.back().size();
  }
  fix_eigen_blocking();
}

MlpWorkspace Mlp::workspace(std::size_t max_batch) const {
  if (max_batch == 0) throw std::invalid_argument("mlp workspace: max_batch must be >= 1");
  return MlpWorkspace(layers_, max_batch);
}

void Mlp::check_params(std::span<const float> params, const char* what) const {
  if (params.size() != parameter_count_) {
    throw std::invalid_argument(fmt::format("mlp: {} has {} floats, the model has {} parameters", what,
                                            params.size(), parameter_count_));
  }
}

void Mlp::initialize(std::span<float> params, RandomStream& rng) const {
  check_params(params, "the parameter buffer");
  for (const TensorInfo& t : tensors_) {
    auto values = params.subspan(t.offset, t.size());
    if (t.cols == 1) {
      std::fill(values.begin(), values.end(), 0.0f);
      continue;
    }
    const double stddev = std::sqrt(2.0 / static_cast<double>(t.cols));
    for (float& v : values) v = static_cast<float>(rng.normal(0.0, stddev));
  }
}

void Mlp::forward(std::span<const float> params, std::span<const float> x, std::size_t batch,
                  MlpWorkspace& ws) const {
  const std::size_t depth = layers_.size() - 1;
  if (ws.activations_.size() != depth || ws.activations_.back().size() != classes() * ws.max_batch_) {
    throw std::invalid_argument("mlp: the workspace was made for a model of another shape");
  }
  if (batch == 0 || batch > ws.max_batch_) {
    throw std::invalid_argument(
        fmt::format("mlp: batch of {} samples; the workspace holds 1 to {}", batch, ws.max_batch_));
  }
  if (x.size() != batch * inputs()) {
    throw std::invalid_argument(fmt::format("mlp: input has {} floats, {} samples of {} features need {}",
                                            x.size(), batch, inputs(), batch * inputs()));
  }
  const float* input = x.data();
  for (std::size_t l = 1; l <= depth; ++l) {
    const TensorInfo& w = tensors_[2 * (l - 1)];
    const TensorInfo& b = tensors_[2 * (l - 1) + 1];
    Eigen::Map<const RowMatrix> weight(params.data() + w.offset, as_index(w.rows), as_index(w.cols));
    Eigen::Map<const Vector> bias(params.data() + b.offset, as_index(b.rows));
    Eigen::Map<const ColMatrix> in(input, as_index(layers_[l - 1]), as_index(batch));
    Eigen::Map<ColMatrix> out(ws.activations_[l - 1].data(), as_index(layers_[l]), as_index(batch));
    out.noalias() = weight * in;
    out.colwise() += bias;
    if (l < depth) out = out.cwiseMax(0.0f);
    input = out.data();
  }
}

double Mlp::loss_and_gradient(std::span<const float> params, std::span<const float> x,
                              std::span<const std::uint8_t> y, std::span<float> grad,
                              MlpWorkspace& ws) const {
  check_params(params, "the parameter buffer");
  check_params(grad, "the gradient buffer");
  const std::size_t batch = y.size();
  forward(params, x, batch, ws);

  // Softmax cross-entropy; the output error (softmax - one_hot) / batch goes into delta_a_.
  const std::size_t depth = layers_.size() - 1;
  const auto k = as_index(classes());
  Eigen::Map<const ColMatrix> logits(ws.activations_.back().data(), k, as_index(batch));
  Eigen::Map<ColMatrix> delta(ws.delta_a_.data(), k, as_index(batch));
  const float scale = 1.0f / static_cast<float>(batch);
  double loss = 0;
  for (Eigen::Index j = 0; j < as_index(batch); ++j) {
    const std::uint8_t label = y[static_cast<std::size_t>(j)];
    if (label >= classes()) {
      throw std::invalid_argument(
          fmt::format("mlp: label {} of sample {} is not a class 0..{}", label, j, classes() - 1));
    }
    const std::span<const float> z(logits.data() + j * k, classes());
    const float log_sum = log_sum_exp(z);
    loss += static_cast<double>(log_sum - z[label]);
    for (Eigen::Index c = 0; c < k; ++c)
      delta(c, j) = std::exp(z[static_cast<std::size_t>(c)] - log_sum) * scale;
    delta(label, j) -= scale;
  }

  float* current = ws.delta_a_.data();
  float* next = ws.delta_b_.data();
  for (std::size_t l = depth; l >= 1; --l) {
    const TensorInfo& w = tensors_[2 * (l - 1)];
    const TensorInfo& b = tensors_[2 * (l - 1) + 1];
    const auto rows = as_index(layers_[l]);
    const auto cols = as_index(layers_[l - 1]);
    Eigen::Map<const ColMatrix> err(current, rows, as_index(batch));
    const float* input = l == 1 ? x.data() : ws.activations_[l - 2].data();
    Eigen::Map<const ColMatrix> in(input, cols, as_index(batch));
    Eigen::Map<RowMatrix> grad_w(grad.data() + w.offset, rows, cols);
    Eigen::Map<Vector> grad_b(grad.data() + b.offset, rows);
    grad_w.noalias() = err * in.transpose();
    // Column after column (not rowwise().sum(), whose order depends on grad_b's address).
    grad_b = err.col(0);
    for (Eigen::Index j = 1; j < as_index(batch); ++j) grad_b += err.col(j);
    if (l == 1) break;
    // Error of the layer below: W^T err, kept only where that layer's ReLU was active.
    Eigen::Map<const RowMatrix> weight(params.data() + w.offset, rows, cols);
    Eigen::Map<ColMatrix> below(next, cols, as_index(batch));
    below.noalias() = weight.transpose() * err;
    below = (in.array() > 0.0f).select(below, 0.0f);
    std::swap(current, next);
  }
  return loss / static_cast<double>(batch);
}

Evaluation Mlp::evaluate(std::span<const float> params, const ImageDataset& data, MlpWorkspace& ws) const {
  check_params(params, "the parameter buffer");
  if (data.features() != inputs()) {
    throw std::invalid_argument(fmt::format(
        "mlp: the data set has {} features per sample, the model takes {}", data.features(), inputs()));
  }
  Evaluation result;
  double loss = 0;
  std::size_t correct = 0;
  const auto k = as_index(classes());
  for (std::size_t start = 0; start < data.size(); start += ws.max_batch_) {
    const std::size_t batch = std::min(ws.max_batch_, data.size() - start);
    forward(params, data.pixels().subspan(start * inputs(), batch * inputs()), batch, ws);
    Eigen::Map<const ColMatrix> logits(ws.activations_.back().data(), k, as_index(batch));
    for (Eigen::Index j = 0; j < as_index(batch); ++j) {
      const std::uint8_t label = data.label(start + static_cast<std::size_t>(j));
      const std::span<const float> z(logits.data() + j * k, classes());
      loss += static_cast<double>(log_sum_exp(z) - z[label]);
      // First maximum: ties go to the lowest class.
      if (std::max_element(z.begin(), z.end()) - z.begin() == label) ++correct;
    }
  }
  result.samples = data.size();
  if (result.samples > 0) {
    result.loss = loss / static_cast<double>(result.samples);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(result.samples);
  }
  return result;
}

double Mlp::forward_flops_per_sample() const {
  double flops = 0;
  for (std::size_t l = 1; l < layers_.size(); ++l) {
    const auto in = static_cast<double>(layers_[l - 1]);
    const auto out = static_cast<double>(layers_[l]);
    flops += 2 * in * out + out;               // multiply-adds and bias
    if (l + 1 < layers_.size()) flops += out;  // ReLU
  }
  return flops + 4 * static_cast<double>(classes());  // softmax: max, subtract, exp, sum
}

double Mlp::train_flops_per_sample() const {
  double flops = forward_flops_per_sample();
  for (std::size_t l = 1; l < layers_.size(); ++l) {
    const auto in = static_cast<double>(layers_[l - 1]);
    const auto out = static_cast<double>(layers_[l]);
    flops += 2 * in * out + out;            // weight and bias gradients
    if (l > 1) flops += 2 * in * out + in;  // input error and ReLU mask
  }
  return flops;
}

}  // namespace pstwin::train
