// The MLP step of workload.kind = "mlp" on a GPU (ps/device.hpp DeviceMlpStep): train::Mlp's math with
// cuBLAS for the products and mlp_kernels.cu for the rest. Per step the parameters and the batch go
// host -> device through pinned buffers this object owns (the worker's own buffers may move or die
// before it, so they are never registered), the gradient comes back the same way.
//
// Layouts, as train::Mlp keeps them: activations column-major (features x batch, a column per sample);
// W_l row-major [out][in], which cuBLAS (column-major) sees as W_l^T of in x out, leading dimension in.
//   forward:   a_l = W_l a_{l-1}      gemm(T, N): (out x batch) = (in x out)^T (in x batch)
//   weights:   dW_l = e_l a_{l-1}^T   as W_l^T: (in x out) = a_{l-1} (in x batch) e_l^T, gemm(N, T)
//   error:     e_{l-1} = W_l^T e_l    gemm(N, N): (in x batch) = (in x out) (out x batch)
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/cuda_gpu.hpp"
#include "cuda/mlp_kernels.hpp"

namespace pstwin::cuda {
namespace {

void check_blas(cublasStatus_t status, std::string_view call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(std::string(call) + ": " + cublasGetStatusString(status) + " (status " +
                      std::to_string(static_cast<int>(status)) + ")");
}

int as_int(std::size_t n, std::string_view what) {
  if (n > static_cast<std::size_t>(1) << 30) throw DeviceError(std::string(what) + " too large for cuBLAS");
  return static_cast<int>(n);
}

// Device memory, released by its owner (CudaMlpStep::release): a plain record so that a failed
// constructor can free what it got.
struct DeviceBuffer {
  void* data = nullptr;
  std::size_t bytes = 0;
};

class CudaMlpStep final : public DeviceMlpStep {
 public:
  CudaMlpStep(std::span<const std::size_t> layers, std::size_t max_batch, int rank)
      : layers_(layers.begin(), layers.end()), max_batch_(max_batch) {
    if (layers_.size() < 2 || max_batch_ == 0)
      throw DeviceError("mlp step: needs at least two layer sizes and a batch of 1 or more");
    std::size_t widest = 0;
    for (std::size_t l = 1; l < layers_.size(); ++l) {
      weight_offset_.push_back(parameters_);
      parameters_ += layers_[l] * layers_[l - 1];
      bias_offset_.push_back(parameters_);
      parameters_ += layers_[l];
      widest = std::max(widest, layers_[l]);
    }
    try {
      const auto gpu = open_worker_gpu(rank);
      device_ = gpu.device;
      name_ = gpu.name + " (cuBLAS)";
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      check_blas(cublasCreate(&blas_), "cublasCreate");
      check_blas(cublasSetStream(blas_, stream_), "cublasSetStream");
      // Plain float32 products: TF32 tensor cores would round the inputs to 10 bits of mantissa and
      // the gradients would no longer match the CPU's within float tolerance.
      check_blas(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode(CUBLAS_PEDANTIC_MATH)");
      const std::size_t inputs = layers_.front() * max_batch_;
      params_ = allocate(parameters_ * sizeof(float), "parameters");
      grad_ = allocate(parameters_ * sizeof(float), "gradient");
      x_ = allocate(inputs * sizeof(float), "batch inputs");
      y_ = allocate(max_batch_, "batch labels");
      loss_ = allocate(max_batch_ * sizeof(float), "per-sample losses");
      delta_a_ = allocate(widest * max_batch_ * sizeof(float), "back-propagated error");
      delta_b_ = allocate(widest * max_batch_ * sizeof(float), "back-propagated error");
      for (std::size_t l = 1; l < layers_.size(); ++l)
        activations_.push_back(allocate(layers_[l] * max_batch_ * sizeof(float), "activations"));
      host_ = pinned((2 * parameters_ + inputs + max_batch_) * sizeof(float) + max_batch_, "staging");
    } catch (...) {
      release();
      throw;
    }
  }

  ~CudaMlpStep() override { release(); }
  CudaMlpStep(const CudaMlpStep&) = delete;
  CudaMlpStep& operator=(const CudaMlpStep&) = delete;

  std::string describe() const override { return name_; }

  double loss_and_gradient(std::span<const float> params, std::span<const float> x,
                           std::span<const std::uint8_t> y, std::span<float> grad) override {
    const std::size_t batch = y.size();
    const std::size_t inputs = layers_.front();
    const std::size_t classes = layers_.back();
    if (params.size() != parameters_ || grad.size() != parameters_)
      throw DeviceError("mlp step: parameter buffer of " + std::to_string(params.size()) +
                        " and gradient of " + std::to_string(grad.size()) + " floats; the model has " +
                        std::to_string(parameters_));
    if (batch == 0 || batch > max_batch_ || x.size() != batch * inputs)
      throw DeviceError("mlp step: " + std::to_string(batch) + " labels and " + std::to_string(x.size()) +
                        " input floats; need 1 to " + std::to_string(max_batch_) + " samples of " +
                        std::to_string(inputs));
    for (std::size_t j = 0; j < batch; ++j)
      if (y[j] >= classes)
        throw DeviceError("mlp step: label " + std::to_string(y[j]) + " of sample " + std::to_string(j) +
                          " is not a class 0.." + std::to_string(classes - 1));
    use_device();

    // Host -> device through the pinned staging: parameters, inputs, labels.
    auto* host_params = static_cast<float*>(host_.data);
    auto* host_x = host_params + parameters_;
    auto* host_grad = host_x + inputs * max_batch_;
    auto* host_loss = host_grad + parameters_;
    auto* host_y = reinterpret_cast<std::uint8_t*>(host_loss + max_batch_);
    std::memcpy(host_params, params.data(), params.size_bytes());
    std::memcpy(host_x, x.data(), x.size_bytes());
    std::memcpy(host_y, y.data(), y.size_bytes());
    copy(params_.data, host_params, params.size_bytes(), cudaMemcpyHostToDevice, "parameters host -> device");
    copy(x_.data, host_x, x.size_bytes(), cudaMemcpyHostToDevice, "batch inputs host -> device");
    copy(y_.data, host_y, y.size_bytes(), cudaMemcpyHostToDevice, "batch labels host -> device");

    const float* w = static_cast<const float*>(params_.data);
    float* g = static_cast<float*>(grad_.data);
    const auto* input_x = static_cast<const float*>(x_.data);
    const std::size_t depth = layers_.size() - 1;
    const int n = as_int(batch, "batch");
    const float one = 1.0f;
    const float zero = 0.0f;

    // Forward: a_l = W_l a_{l-1} + b_l, ReLU below the last layer.
    const float* in = input_x;
    for (std::size_t l = 1; l <= depth; ++l) {
      auto* out = static_cast<float*>(activations_[l - 1].data);
      const int rows = as_int(layers_[l], "layer width");
      const int cols = as_int(layers_[l - 1], "layer width");
      check_blas(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &one, w + weight_offset_[l - 1],
                             cols, in, cols, &zero, out, rows),
                 "cublasSgemm(forward, layer " + std::to_string(l) + ")");
      check(launch_bias_relu(out, w + bias_offset_[l - 1], layers_[l], batch, l < depth, stream_),
            "bias/ReLU kernel launch (layer " + std::to_string(l) + ")");
      in = out;
    }

    // Softmax cross-entropy: per-sample losses, and the output error (softmax - one_hot) / batch.
    auto* current = static_cast<float*>(delta_a_.data);
    auto* next = static_cast<float*>(delta_b_.data);
    const float scale = 1.0f / static_cast<float>(batch);
    check(launch_softmax_xent(static_cast<const float*>(activations_.back().data),
                              static_cast<const std::uint8_t*>(y_.data), classes, batch, scale, current,
                              static_cast<float*>(loss_.data), stream_),
          "softmax cross-entropy kernel launch");

    // Backward, last layer first.
    for (std::size_t l = depth; l >= 1; --l) {
      const int rows = as_int(layers_[l], "layer width");
      const int cols = as_int(layers_[l - 1], "layer width");
      const float* below_in = l == 1 ? input_x : static_cast<const float*>(activations_[l - 2].data);
      check_blas(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_T, cols, rows, n, &one, below_in, cols, current,
                             rows, &zero, g + weight_offset_[l - 1], cols),
                 "cublasSgemm(weight gradient, layer " + std::to_string(l) + ")");
      check(launch_row_sums(current, layers_[l], batch, g + bias_offset_[l - 1], stream_),
            "bias gradient kernel launch (layer " + std::to_string(l) + ")");
      if (l == 1) break;
      check_blas(cublasSgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, cols, n, rows, &one, w + weight_offset_[l - 1],
                             cols, current, rows, &zero, next, cols),
                 "cublasSgemm(input error, layer " + std::to_string(l) + ")");
      check(launch_relu_mask(next, below_in, layers_[l - 1] * batch, stream_),
            "ReLU backward kernel launch (layer " + std::to_string(l) + ")");
      std::swap(current, next);
    }

    // Device -> host: the gradient and the per-sample losses, then wait for the stream.
    copy(host_grad, grad_.data, grad.size_bytes(), cudaMemcpyDeviceToHost, "gradient device -> host");
    copy(host_loss, loss_.data, batch * sizeof(float), cudaMemcpyDeviceToHost, "losses device -> host");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(after the mlp step)");
    std::memcpy(grad.data(), host_grad, grad.size_bytes());
    // Summed in sample order in double, as Mlp::loss_and_gradient does.
    double loss = 0;
    for (std::size_t j = 0; j < batch; ++j) loss += static_cast<double>(host_loss[j]);
    return loss / static_cast<double>(batch);
  }

 private:
  DeviceBuffer allocate(std::size_t bytes, std::string_view what) {
    DeviceBuffer buffer{nullptr, std::max<std::size_t>(bytes, sizeof(float))};
    check(cudaMalloc(&buffer.data, buffer.bytes),
          "cudaMalloc(" + std::string(what) + ", " + std::to_string(buffer.bytes) + " bytes)");
    owned_.push_back(buffer.data);
    return buffer;
  }

  DeviceBuffer pinned(std::size_t bytes, std::string_view what) {
    DeviceBuffer buffer{nullptr, bytes};
    check(cudaMallocHost(&buffer.data, bytes),
          "cudaMallocHost(" + std::string(what) + ", " + std::to_string(bytes) + " bytes)");
    return buffer;
  }

  void copy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind, std::string_view what) {
    check(cudaMemcpyAsync(to, from, bytes, kind, stream_), "cudaMemcpyAsync(" + std::string(what) + ")");
  }

  // The current device is per thread, and the worker's compute lane may run on any thread.
  void use_device() const { check(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")"); }

  // Never throws: the destructor's and a failed constructor's clean-up.
  void release() noexcept {
    if (device_ < 0) return;
    (void)cudaSetDevice(device_);
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    if (blas_ != nullptr) (void)cublasDestroy(blas_);
    blas_ = nullptr;
    for (void* allocation : owned_) (void)cudaFree(allocation);
    owned_.clear();
    if (host_.data != nullptr) (void)cudaFreeHost(host_.data);
    host_ = {};
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  const std::vector<std::size_t> layers_;
  const std::size_t max_batch_;
  std::vector<std::size_t> weight_offset_, bias_offset_;  // by layer - 1, in floats
  std::size_t parameters_ = 0;
  int device_ = -1;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::vector<void*> owned_;  // every cudaMalloc, freed by release
  DeviceBuffer params_, grad_, x_, y_, loss_, delta_a_, delta_b_;
  std::vector<DeviceBuffer> activations_;  // per layer l >= 1: layers[l] x max_batch
  DeviceBuffer host_;                      // pinned: parameters, inputs, gradient, losses, labels
};

}  // namespace

std::unique_ptr<DeviceMlpStep> gpu::make_mlp_step(std::span<const std::size_t> layers, std::size_t max_batch,
                                                  int rank) {
  return std::make_unique<CudaMlpStep>(layers, max_batch, rank);
}

}  // namespace pstwin::cuda
