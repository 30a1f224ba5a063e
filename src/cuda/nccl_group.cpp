#include "cuda/nccl_group.hpp"

#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "cuda/cuda_check.hpp"

namespace pstwin::cuda {
namespace {

// The id travels as kDeviceGroupIdBytes in a local_reduce message (ps/device_reduce.hpp).
static_assert(sizeof(ncclUniqueId) == kDeviceGroupIdBytes, "an ncclUniqueId is NCCL_UNIQUE_ID_BYTES");

// Every NCCL call goes through here: the call, ncclGetErrorString, and NCCL's own last message (which
// says what, e.g. "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 0").
void check_nccl(ncclResult_t result, std::string_view call, ncclComm_t comm = nullptr) {
  if (result == ncclSuccess) return;
  std::string text = std::string(call) + ": " + ncclGetErrorString(result);
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0')
    text += ": " + std::string(last);
  throw DeviceError(text);
}

std::string key_text(const PartitionSpec& partition) {
  return "key " + std::to_string(partition.key) + ", " + std::to_string(partition.bytes) + " bytes";
}

class NcclGroup final : public DeviceGroup {
 public:
  NcclGroup(const SyntheticWorkload& workload, MemberDevice device, std::span<const std::byte> id, int member,
            int members)
      : workload_(workload), device_(std::move(device)), member_(member), members_(members) {
    if (id.size() != sizeof(ncclUniqueId))
      throw DeviceError("ncclCommInitRank: a group id of " + std::to_string(id.size()) + " bytes, not " +
                        std::to_string(sizeof(ncclUniqueId)));
    ncclUniqueId unique{};
    std::memcpy(unique.internal, id.data(), sizeof(unique.internal));
    try {
      use_device();
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags(nccl stream)");
      const std::string init = "ncclCommInitRank(rank " + std::to_string(member) + " of " +
                               std::to_string(members) + " on " + device_.name + ")";
      check_nccl(ncclCommInitRank(&comm_, members, unique, member), init);
      if (member_ == 0) {
        sums_.assign(workload.partitions().size(), nullptr);
        for (std::size_t i = 0; i < sums_.size(); ++i) {
          const auto& partition = workload.partitions()[i];
          void* allocation = nullptr;
          check(cudaMalloc(&allocation, std::max<std::size_t>(partition.bytes, sizeof(float))),
                "cudaMalloc(sum buffer, " + key_text(partition) + ")");
          sums_[i] = static_cast<float*>(allocation);
        }
      }
    } catch (...) {
      release(true);
      throw;
    }
  }

  ~NcclGroup() override { release(failed_); }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  std::string describe() const override {
    return "nccl rank " + std::to_string(member_) + " of " + std::to_string(members_) + " on " + device_.name;
  }

  void reduce(const PartitionSpec& partition) override {
    use_device();
    wait_for_tensors("reduce", partition);
    float* values = device_.values(partition);
    check_nccl(ncclReduce(values, member_ == 0 ? sum(partition) : values, count(partition), ncclFloat,
                          ncclSum, 0, comm_, stream_),
               "ncclReduce(" + key_text(partition) + ")", comm_);
    finish("ncclReduce", partition);
  }

  void broadcast(const PartitionSpec& partition) override {
    use_device();
    wait_for_tensors("broadcast", partition);
    float* values = device_.values(partition);
    check_nccl(ncclBroadcast(member_ == 0 ? sum(partition) : values, values, count(partition), ncclFloat, 0,
                             comm_, stream_),
               "ncclBroadcast(" + key_text(partition) + ")", comm_);
    finish("ncclBroadcast", partition);
  }

  void copy_out_sum(const PartitionSpec& partition, const std::shared_ptr<ByteBuffer>& staging) override {
    device_.to_host(root_sum("copy of the sum", partition), partition, staging);
  }

  void copy_in_sum(const PartitionSpec& partition, std::span<const float> aggregate) override {
    device_.to_device(root_sum("copy of the aggregate", partition), partition, aggregate);
  }

 private:
  // The current device is per thread, and the collective and copy lanes both call us.
  void use_device() const {
    check(cudaSetDevice(device_.device), "cudaSetDevice(" + std::to_string(device_.device) + ")");
  }

  std::size_t count(const PartitionSpec& partition) const { return partition.bytes / sizeof(float); }
  float* sum(const PartitionSpec& partition) const { return sums_.at(workload_.index_of(partition.key)); }

  float* root_sum(const std::string& what, const PartitionSpec& partition) const {
    if (member_ != 0)
      throw DeviceError(what + " of " + key_text(partition) + ": rank " + std::to_string(member_) +
                        " holds no sum (only rank 0 does)");
    return sum(partition);
  }

  // The fill kernels run on the tensors' stream, the collectives on ours: ours must see their values.
  void wait_for_tensors(std::string_view what, const PartitionSpec& partition) const {
    check(cudaStreamSynchronize(device_.tensor_stream), "cudaStreamSynchronize(tensor stream, before the " +
                                                            std::string(what) + " of " + key_text(partition) +
                                                            ")");
  }

  // Until the collective is done on this GPU: it waits for every rank, so a rank that failed would leave
  // cudaStreamSynchronize waiting for ever. Poll instead, and give up when NCCL reports an asynchronous
  // error (a peer's failure, a network error): the run then fails naming the call.
  void finish(std::string_view call, const PartitionSpec& partition) {
    const std::string what = std::string(call) + "(" + key_text(partition) + ")";
    while (true) {
      const cudaError_t status = cudaStreamQuery(stream_);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) {
        failed_ = true;
        check(status, "cudaStreamQuery(after " + what + ")");
      }
      ncclResult_t async = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError(after " + what + ")", comm_);
      if (async != ncclSuccess && async != ncclInProgress) {
        failed_ = true;
        check_nccl(async, what + " (asynchronous error)", comm_);
      }
      std::this_thread::yield();
    }
  }

  // Never throws: the destructor's and a failed constructor's clean-up. After an error the communicator
  // is aborted (ncclCommDestroy would wait for the operations the failed peers never join).
  void release(bool abort) noexcept {
    (void)cudaSetDevice(device_.device);
    if (comm_ != nullptr) {
      if (abort)
        (void)ncclCommAbort(comm_);
      else
        (void)ncclCommDestroy(comm_);
      comm_ = nullptr;
    }
    if (stream_ != nullptr) {
      if (!abort) (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
      stream_ = nullptr;
    }
    for (float* allocation : sums_)
      if (allocation != nullptr) (void)cudaFree(allocation);
    sums_.clear();
  }

  const SyntheticWorkload& workload_;
  const MemberDevice device_;
  const int member_;
  const int members_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  std::vector<float*> sums_;  // rank 0: by SyntheticWorkload::index_of(key)
  bool failed_ = false;
};

}  // namespace

std::vector<std::byte> nccl_unique_id() {
  ncclUniqueId id{};
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<std::byte> bytes(sizeof(id.internal));
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return bytes;
}

std::unique_ptr<DeviceGroup> join_nccl_group(const SyntheticWorkload& workload, MemberDevice device,
                                             std::span<const std::byte> id, int member, int members) {
  return std::make_unique<NcclGroup>(workload, std::move(device), id, member, members);
}

}  // namespace pstwin::cuda
