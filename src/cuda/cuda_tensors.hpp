// The CUDA device path (workload.device = "cuda", docs/HARDWARE.md): a worker's tensors in GPU memory
// behind ps/device.hpp's DeviceTensors, so protocol code never sees a CUDA header. When CMake found CUDA
// (PSTWIN_CUDA) these calls open the module libpstwin_cuda.so on first use (cuda_loader.cpp,
// cuda_module.hpp), whose GPU code is cuda_tensors.cpp, cuda_mlp.cpp and the kernels; else they are
// cuda_stub.cpp's, whose every device is missing with the reason "built without CUDA".
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "ps/device.hpp"
#include "ps/workload.hpp"

namespace pstwin::cuda {

// What this process can use: the GPUs visible, or why there are none (one line, e.g.
// "cudaGetDeviceCount: no CUDA-capable device is detected").
struct Availability {
  int devices = 0;
  std::string why;
};
Availability availability();

// Worker `rank`'s tensors on GPU rank mod the GPUs visible, with its own stream. Throws DeviceError
// naming the CUDA call and cudaGetErrorString when the device cannot be used.
std::unique_ptr<DeviceTensors> make_device_tensors(const SyntheticWorkload& workload, int rank);

// What the real backends hand zeno::JobRoles: make_device_tensors. Loads nothing until called.
DeviceFactory device_factory();

// workload.kind = "mlp": worker `rank`'s MLP step on GPU rank mod the GPUs visible, with cuBLAS
// (cuda_mlp.cpp). Throws DeviceError naming the CUDA or cuBLAS call when the device cannot be used.
std::unique_ptr<DeviceMlpStep> make_mlp_step(std::span<const std::size_t> layers, std::size_t max_batch,
                                             int rank);
// What the real backends hand zeno::JobRoles: make_mlp_step. Loads nothing until called.
MlpStepFactory mlp_step_factory();

}  // namespace pstwin::cuda
