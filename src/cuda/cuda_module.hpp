// The CUDA device path as a shared module. In a CUDA build the GPU code (cuda_tensors.cpp, cuda_mlp.cpp,
// nccl_group.cpp and the kernels) is libpstwin_cuda.so, the only binary linked to libcudart, cuBLAS and
// NCCL; a process opens it on its first device call (cuda_loader.cpp), so one that never uses
// workload.device = "cuda" never maps those libraries (docs/PERFORMANCE.md, "Start-up").
//
// The module's one exported symbol, kModuleEntry, returns its Module: an abstract factory, so the
// boundary is a vtable and nothing else. The module links its own copy of the layers below (ps, scenario,
// core) and exports none of it, so the objects that cross (SyntheticWorkload, DeviceError) must have the
// same layout on both sides: the module comes from the binary's own build (cmake --install puts both),
// and the interface number refuses one left over from an older Module.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "cuda/cuda_tensors.hpp"
#include "ps/device.hpp"
#include "ps/workload.hpp"

namespace pstwin::cuda {

// Changes with Module's layout: a loader refuses a module built against another (the entry returns null).
inline constexpr int kModuleInterface = 1;

// cuda_tensors.hpp's calls, as the module implements them with CUDA. The module owns the one instance,
// which lives as long as the module stays mapped.
class Module {
 public:
  virtual Availability availability() const = 0;
  virtual std::unique_ptr<DeviceTensors> make_device_tensors(const SyntheticWorkload& workload,
                                                             int rank) const = 0;
  virtual std::unique_ptr<DeviceMlpStep> make_mlp_step(std::span<const std::size_t> layers,
                                                       std::size_t max_batch, int rank) const = 0;

 protected:
  virtual ~Module() = default;  // never deleted through this interface: the module owns it
};

// The entry point's name, for dlsym.
inline constexpr const char* kModuleEntry = "pstwin_cuda_module";
// Its type: the module's Module when `interface` is its kModuleInterface, else null.
using ModuleEntry = const Module* (*)(int interface);

}  // namespace pstwin::cuda
