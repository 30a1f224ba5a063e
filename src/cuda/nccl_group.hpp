// ps.local_reduce = "nccl" on GPUs: ps/device.hpp's DeviceGroup over an NCCL communicator, which
// CudaTensors (cuda_tensors.cpp) opens for its worker; part of the module libpstwin_cuda.so. Built from
// nccl_group.cpp where CMake found NCCL (PSTWIN_NCCL), else from nccl_missing.cpp, whose every call
// fails with the reason.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ps/device.hpp"
#include "ps/workload.hpp"

namespace pstwin::cuda {

// What a group member needs of its worker's CudaTensors.
struct MemberDevice {
  int device = -1;                                     // the CUDA device the tensors are on
  std::string name;                                    // "cuda:0 NVIDIA H100 80GB HBM3"
  cudaStream_t tensor_stream = nullptr;                // the tensors' stream: the fill kernels run on it
  std::function<float*(const PartitionSpec&)> values;  // a partition's device memory
  // The tensors' copies (pinning the staging buffer once), for the root's sum buffers.
  std::function<void(const float* device, const PartitionSpec&, const std::shared_ptr<ByteBuffer>& staging)>
      to_host;
  std::function<void(float* device, const PartitionSpec&, std::span<const float> values)> to_device;
};

// A new ncclUniqueId's bytes (ncclGetUniqueId). Throws DeviceError naming the call and ncclGetErrorString.
std::vector<std::byte> nccl_unique_id();

// Joins the communicator `id` as rank `member` of `members` (ncclCommInitRank: returns once all joined)
// on `device`, with a stream of its own; member 0 gets a sum buffer per partition. Every CUDA and NCCL
// call is checked: DeviceError naming the call, cudaGetErrorString or ncclGetErrorString and NCCL's
// last error (e.g. two ranks on one GPU: "Duplicate GPU detected").
std::unique_ptr<DeviceGroup> join_nccl_group(const SyntheticWorkload& workload, MemberDevice device,
                                             std::span<const std::byte> id, int member, int members);

}  // namespace pstwin::cuda
