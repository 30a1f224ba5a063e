// How the CUDA path checks a runtime call: a failure is a DeviceError naming the call and
// cudaGetErrorString, never a crash (cuda_tensors.cpp, nccl_group.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <string_view>

#include "ps/device.hpp"

namespace pstwin::cuda {

inline std::string status_text(cudaError_t status) {
  return std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + ")";
}

inline void check(cudaError_t status, std::string_view call) {
  if (status != cudaSuccess) throw DeviceError(std::string(call) + ": " + status_text(status));
}

}  // namespace pstwin::cuda
