// libpstwin_cuda.so's one exported symbol (cuda_module_exports.map): the Module over the CUDA code.
#include "cuda/cuda_gpu.hpp"
#include "cuda/cuda_module.hpp"

namespace pstwin::cuda {
namespace {

class CudaModule final : public Module {
 public:
  Availability availability() const override { return gpu::availability(); }
  std::unique_ptr<DeviceTensors> make_device_tensors(const SyntheticWorkload& workload,
                                                     int rank) const override {
    return gpu::make_device_tensors(workload, rank);
  }
  std::unique_ptr<DeviceMlpStep> make_mlp_step(std::span<const std::size_t> layers, std::size_t max_batch,
                                               int rank) const override {
    return gpu::make_mlp_step(layers, max_batch, rank);
  }
};

}  // namespace
}  // namespace pstwin::cuda

extern "C" const pstwin::cuda::Module* pstwin_cuda_module(int interface) {
  static const pstwin::cuda::CudaModule module{};
  return interface == pstwin::cuda::kModuleInterface ? &module : nullptr;
}
