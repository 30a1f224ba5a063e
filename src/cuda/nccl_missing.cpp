// The NCCL group of a CUDA build without NCCL (PSTWIN_NCCL=OFF, or nccl.h / libnccl not found). The
// scenario already refuses ps.local_reduce = "nccl" in such a build; this only keeps callers whole.
#include "cuda/nccl_group.hpp"

namespace pstwin::cuda {
namespace {

constexpr const char* kWhy =
    "ps.local_reduce = \"nccl\": this pstwin was built without NCCL (install NCCL and reconfigure with "
    "-DPSTWIN_CUDA=ON -DPSTWIN_NCCL=ON)";

}  // namespace

std::vector<std::byte> nccl_unique_id() {
  throw DeviceError(kWhy);
}

std::unique_ptr<DeviceGroup> join_nccl_group(const SyntheticWorkload&, MemberDevice,
                                             std::span<const std::byte>, int, int) {
  throw DeviceError(kWhy);
}

}  // namespace pstwin::cuda
