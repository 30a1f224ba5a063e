// The device path of a build without CUDA (PSTWIN_CUDA=OFF, or no toolkit found): no device, and why.
// The scenario already refuses workload.device = "cuda" in such a build; this only keeps callers whole.
#include "cuda/cuda_tensors.hpp"

namespace pstwin::cuda {
namespace {

constexpr const char* kWhy =
    "built without CUDA (reconfigure with -DPSTWIN_CUDA=ON where the CUDA toolkit is installed)";

}  // namespace

Availability availability() {
  return {0, kWhy};
}

std::unique_ptr<DeviceTensors> make_device_tensors(const SyntheticWorkload&, int) {
  throw DeviceError(std::string("workload.device = \"cuda\": ") + kWhy);
}

DeviceFactory device_factory() {
  return make_device_tensors;
}

std::unique_ptr<DeviceMlpStep> make_mlp_step(std::span<const std::size_t>, std::size_t, int) {
  throw DeviceError(std::string("workload.device = \"cuda\": ") + kWhy);
}

MlpStepFactory mlp_step_factory() {
  return make_mlp_step;
}

}  // namespace pstwin::cuda
