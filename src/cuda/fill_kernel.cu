#include "cuda/fill_kernel.hpp"

#include <algorithm>

namespace pstwin::cuda {
namespace {

__global__ void fill(float* out, std::size_t n, float base, std::uint32_t phase) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride)
    out[j] = base + static_cast<float>((phase + j) % 8);
}

}  // namespace

cudaError_t launch_fill(float* out, std::size_t n, float base, std::uint32_t phase, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr unsigned kThreads = 256;
  const auto blocks = static_cast<unsigned>(std::min<std::size_t>((n + kThreads - 1) / kThreads, 1024));
  fill<<<blocks, kThreads, 0, stream>>>(out, n, base, phase);
  return cudaGetLastError();
}

}  // namespace pstwin::cuda
