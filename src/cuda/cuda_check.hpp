// How the CUDA path checks a runtime call: a failure is a DeviceError naming the call and
// cudaGetErrorString, never a crash (cuda_tensors.cpp, cuda_mlp.cpp, nccl_group.cpp).
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

// Worker `rank`'s GPU (rank mod the devices visible), made current on this thread.
struct WorkerGpu {
  int device = -1;
  std::string name;  // for logs: "cuda:0 NVIDIA H100 80GB HBM3"
};
inline WorkerGpu open_worker_gpu(int rank) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count <= 0) throw DeviceError("cudaGetDeviceCount: no CUDA device visible");
  WorkerGpu gpu{.device = rank % count, .name = ""};
  check(cudaSetDevice(gpu.device), "cudaSetDevice(" + std::to_string(gpu.device) + ")");
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, gpu.device), "cudaGetDeviceProperties");
  gpu.name = "cuda:" + std::to_string(gpu.device) + " " + properties.name;
  return gpu;
}

}  // namespace pstwin::cuda
