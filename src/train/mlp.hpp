// A multi-layer perceptron (default 784-256-128-10), ReLU between layers, softmax cross-entropy.
// All parameters live in one flat float32 buffer; each tensor (W1, b1, W2, b2, ...) is a contiguous
// slice of it, because each becomes one parameter-server key. W_l is stored row-major [out][in]
// (PyTorch's nn.Linear layout), b_l as [out]. Gradients use the same layout and are batch means.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/random.hpp"
#include "train/idx_dataset.hpp"

namespace pstwin::train {

struct TensorInfo {
  std::string name;        // "W1", "b1", ... (layer numbers from 1)
  int layer = 0;           // 1-based layer index: earlier layers get higher PS priority
  std::size_t offset = 0;  // in floats, within the flat parameter buffer
  std::size_t rows = 0;    // out features
  std::size_t cols = 0;    // in features (1 for a bias)
  std::size_t size() const { return rows * cols; }
};

struct Evaluation {
  double loss = 0;      // mean cross-entropy
  double accuracy = 0;  // fraction of argmax(logits) == label (ties: lowest class)
  std::size_t samples = 0;
};

class Mlp;

// Activation and gradient buffers for batches of up to `max_batch` samples, allocated once so a
// training step allocates nothing. One per thread that runs steps.
class MlpWorkspace {
 public:
  std::size_t max_batch() const { return max_batch_; }

 private:
  friend class Mlp;
  MlpWorkspace(const std::vector<std::size_t>& layers, std::size_t max_batch);
  std::size_t max_batch_ = 0;
  std::vector<std::vector<float>> activations_;  // per layer l >= 1: layers[l] x max_batch
  std::vector<float> delta_a_, delta_b_;         // back-propagated error, ping-pong
};

class Mlp {
 public:
  // `layers`: input size, hidden sizes..., number of classes; at least 2 entries, each >= 1.
  explicit Mlp(std::vector<std::size_t> layers = {784, 256, 128, 10});

  const std::vector<std::size_t>& layers() const { return layers_; }
  std::size_t inputs() const { return layers_.front(); }
  std::size_t classes() const { return layers_.back(); }
  // In PS order: W1, b1, W2, b2, ...
  std::span<const TensorInfo> tensors() const { return tensors_; }
  std::size_t parameter_count() const { return parameter_count_; }
  template <typename T>
  std::span<T> tensor(std::span<T> params, std::size_t index) const {
    return params.subspan(tensors_.at(index).offset, tensors_.at(index).size());
  }

  MlpWorkspace workspace(std::size_t max_batch) const;

  // He initialisation: W ~ N(0, 2 / fan_in) drawn tensor by tensor in memory order, biases 0.
  void initialize(std::span<float> params, RandomStream& rng) const;

  // Mean cross-entropy of the batch (x: batch x inputs, sample after sample; y: labels), and its
  // gradient with respect to every parameter written (not added) into `grad`.
  double loss_and_gradient(std::span<const float> params, std::span<const float> x,
                           std::span<const std::uint8_t> y, std::span<float> grad, MlpWorkspace& ws) const;

  // Loss and accuracy over every sample of `data`, in chunks of ws.max_batch().
  Evaluation evaluate(std::span<const float> params, const ImageDataset& data, MlpWorkspace& ws) const;

  // For the simulator's cost model: multiply-adds count 2 FLOPs; bias, ReLU and softmax counted.
  double forward_flops_per_sample() const;
  double train_flops_per_sample() const;  // forward + backward (no input gradient for layer 1)

 private:
  // Runs the layers on `batch` samples in x; logits end up in ws.activations_.back().
  void forward(std::span<const float> params, std::span<const float> x, std::size_t batch,
               MlpWorkspace& ws) const;
  void check_params(std::span<const float> params, const char* what) const;

  std::vector<std::size_t> layers_;
  std::vector<TensorInfo> tensors_;
  std::size_t parameter_count_ = 0;
};

}  // namespace pstwin::train
