// Inside libpstwin_cuda.so only: the CUDA implementations of cuda_tensors.hpp's calls, which the module's
// entry point (cuda_module_entry.cpp) hands the process as its Module. The process itself calls the ones
// in namespace pstwin::cuda, which load the module first (cuda_loader.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "cuda/cuda_tensors.hpp"
#include "ps/device.hpp"
#include "ps/workload.hpp"

namespace pstwin::cuda::gpu {

// cudaGetDeviceCount's answer, or why there is none.
Availability availability();
// CudaTensors (cuda_tensors.cpp) for worker `rank`.
std::unique_ptr<DeviceTensors> make_device_tensors(const SyntheticWorkload& workload, int rank);
// CudaMlpStep (cuda_mlp.cpp) for worker `rank`.
std::unique_ptr<DeviceMlpStep> make_mlp_step(std::span<const std::size_t> layers, std::size_t max_batch,
                                             int rank);

}  // namespace pstwin::cuda::gpu
