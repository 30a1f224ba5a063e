// The one kernel of the device path: a partition's synthetic values, computed on the GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pstwin::cuda {

// out[j] = base + ((phase + j) mod 8) for j < n, on `stream`: SyntheticWorkload::fill's values exactly
// (small integers, exact in float32). Returns the launch's status.
cudaError_t launch_fill(float* out, std::size_t n, float base, std::uint32_t phase, cudaStream_t stream);

}  // namespace pstwin::cuda
