#include "cuda/mlp_kernels.hpp"

#include <algorithm>

namespace pstwin::cuda {
namespace {

constexpr unsigned kThreads = 256;

unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>(
      std::max<std::size_t>(1, std::min<std::size_t>((n + kThreads - 1) / kThreads, 4096)));
}

__global__ void bias_relu(float* out, const float* bias, std::size_t rows, std::size_t n, bool relu) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = out[i] + bias[i % rows];
    out[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

// One thread per sample: the classes are few (10), and a scalar loop keeps the CPU's summation order.
__global__ void softmax_xent(const float* logits, const std::uint8_t* labels, std::size_t classes,
                             std::size_t batch, float scale, float* delta, float* loss) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < batch;
       j += stride) {
    const float* z = logits + j * classes;
    float top = z[0];
    for (std::size_t c = 1; c < classes; ++c) top = fmaxf(top, z[c]);
    float sum = 0;
    for (std::size_t c = 0; c < classes; ++c) sum += expf(z[c] - top);
    const float log_sum = top + logf(sum);
    const std::uint8_t label = labels[j];
    loss[j] = log_sum - z[label];
    float* d = delta + j * classes;
    for (std::size_t c = 0; c < classes; ++c) d[c] = expf(z[c] - log_sum) * scale;
    d[label] -= scale;
  }
}

__global__ void row_sums(const float* err, std::size_t rows, std::size_t batch, float* out) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t r = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += stride) {
    float sum = err[r];
    for (std::size_t j = 1; j < batch; ++j) sum += err[j * rows + r];
    out[r] = sum;
  }
}

__global__ void relu_mask(float* below, const float* input, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    if (!(input[i] > 0.0f)) below[i] = 0.0f;
}

}  // namespace

cudaError_t launch_bias_relu(float* out, const float* bias, std::size_t rows, std::size_t batch, bool relu,
                             cudaStream_t stream) {
  const std::size_t n = rows * batch;
  if (n == 0) return cudaSuccess;
  bias_relu<<<blocks_for(n), kThreads, 0, stream>>>(out, bias, rows, n, relu);
  return cudaGetLastError();
}

cudaError_t launch_softmax_xent(const float* logits, const std::uint8_t* labels, std::size_t classes,
                                std::size_t batch, float scale, float* delta, float* loss,
                                cudaStream_t stream) {
  if (batch == 0) return cudaSuccess;
  softmax_xent<<<blocks_for(batch), kThreads, 0, stream>>>(logits, labels, classes, batch, scale, delta,
                                                           loss);
  return cudaGetLastError();
}

cudaError_t launch_row_sums(const float* err, std::size_t rows, std::size_t batch, float* out,
                            cudaStream_t stream) {
  if (rows == 0 || batch == 0) return cudaSuccess;
  row_sums<<<blocks_for(rows), kThreads, 0, stream>>>(err, rows, batch, out);
  return cudaGetLastError();
}

cudaError_t launch_relu_mask(float* below, const float* input, std::size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  relu_mask<<<blocks_for(n), kThreads, 0, stream>>>(below, input, n);
  return cudaGetLastError();
}

}  // namespace pstwin::cuda
