#include "cuda/cuda_gpu.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/fill_kernel.hpp"
#include "cuda/nccl_group.hpp"

namespace pstwin::cuda {
namespace {

std::string key_text(const PartitionSpec& partition) {
  return "key " + std::to_string(partition.key) + ", " + std::to_string(partition.bytes) + " bytes";
}

class CudaTensors final : public DeviceTensors {
 public:
  CudaTensors(const SyntheticWorkload& workload, int rank) : workload_(workload), rank_(rank) {
    try {
      auto gpu = open_worker_gpu(rank);
      device_ = gpu.device;
      name_ = std::move(gpu.name);
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      memory_.assign(workload.partitions().size(), nullptr);
      for (std::size_t i = 0; i < memory_.size(); ++i) {
        const auto& partition = workload.partitions()[i];
        void* allocation = nullptr;
        check(cudaMalloc(&allocation, std::max<std::size_t>(partition.bytes, sizeof(float))),
              "cudaMalloc(" + key_text(partition) + ")");
        memory_[i] = static_cast<float*>(allocation);
      }
    } catch (...) {
      release();
      throw;
    }
  }

  ~CudaTensors() override { release(); }
  CudaTensors(const CudaTensors&) = delete;
  CudaTensors& operator=(const CudaTensors&) = delete;

  std::string describe() const override { return name_; }

  void produce(const PartitionSpec& partition, std::uint32_t iteration) override {
    use_device();
    const auto base = static_cast<float>(1 + static_cast<std::uint64_t>(rank_) % workload_.worker_modulus());
    const auto phase = static_cast<std::uint32_t>((iteration + partition.key) % 8);
    check(launch_fill(memory(partition), partition.bytes / sizeof(float), base, phase, stream_),
          "fill kernel launch (" + key_text(partition) + ")");
  }

  void copy_out(const PartitionSpec& partition, const std::shared_ptr<ByteBuffer>& staging) override {
    to_host(memory(partition), partition, staging, "");
  }

  void copy_in(const PartitionSpec& partition, std::span<const float> aggregate) override {
    to_device(memory(partition), partition, aggregate, "");
  }

  std::vector<float> read(const PartitionSpec& partition) override {
    use_device();
    std::vector<float> values(partition.bytes / sizeof(float));
    check(cudaMemcpyAsync(values.data(), memory(partition), values.size() * sizeof(float),
                          cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync(device -> host read-back, " + key_text(partition) + ")");
    check(cudaStreamSynchronize(stream_),
          "cudaStreamSynchronize(after the read-back of " + key_text(partition) + ")");
    return values;
  }

  std::vector<std::byte> new_group_id() override { return nccl_unique_id(); }

  std::unique_ptr<DeviceGroup> join_group(std::span<const std::byte> id, int member, int members) override {
    MemberDevice member_device{
        .device = device_,
        .name = name_,
        .tensor_stream = stream_,
        .values = [this](const PartitionSpec& partition) { return memory(partition); },
        .to_host =
            [this](const float* device, const PartitionSpec& partition,
                   const std::shared_ptr<ByteBuffer>& staging) {
              to_host(device, partition, staging, "sum ");
            },
        .to_device = [this](float* device, const PartitionSpec& partition,
                            std::span<const float> values) { to_device(device, partition, values, "sum "); },
    };
    return join_nccl_group(workload_, std::move(member_device), id, member, members);
  }

 private:
  // The copy-in (and the nccl root's sum, `what` = "sum "): device -> host into the pinned staging buffer.
  void to_host(const float* device, const PartitionSpec& partition,
               const std::shared_ptr<ByteBuffer>& staging, std::string_view what) {
    if (staging->size() < partition.bytes)
      throw DeviceError("copy of " + key_text(partition) + ": staging buffer of " +
                        std::to_string(staging->size()) + " bytes is smaller");
    use_device();
    pin(partition, staging);
    check(cudaMemcpyAsync(staging->data(), device, partition.bytes, cudaMemcpyDeviceToHost, stream_),
          "cudaMemcpyAsync(device " + std::string(what) + "-> host staging, " + key_text(partition) + ")");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(after the device " + std::string(what) +
                                              "-> host copy of " + key_text(partition) + ")");
  }

  // A pulled aggregate, host -> device (into the values, or the nccl root's sum buffer).
  void to_device(float* device, const PartitionSpec& partition, std::span<const float> aggregate,
                 std::string_view what) {
    if (aggregate.size_bytes() != partition.bytes)
      throw DeviceError("copy of the aggregate of " + key_text(partition) + ": got " +
                        std::to_string(aggregate.size_bytes()) + " bytes");
    use_device();
    check(cudaMemcpyAsync(device, aggregate.data(), partition.bytes, cudaMemcpyHostToDevice, stream_),
          "cudaMemcpyAsync(host -> device " + std::string(what) + "aggregate, " + key_text(partition) + ")");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(after the host -> device " +
                                              std::string(what) + "copy of " + key_text(partition) + ")");
  }

  // The current device is per thread, and every lane thread may call us.
  void use_device() const { check(cudaSetDevice(device_), "cudaSetDevice(" + std::to_string(device_) + ")"); }

  float* memory(const PartitionSpec& partition) const { return memory_[workload_.index_of(partition.key)]; }

  // A staging buffer is registered (pinned, so the copy is one DMA) once, on its first copy. Workers
  // of one process may share one (staging.naming = legacy-key-only): the second finds it registered.
  void pin(const PartitionSpec& partition, const std::shared_ptr<ByteBuffer>& staging) {
    std::lock_guard lock(mutex_);
    if (staging->size() == 0 || pinned_.contains(staging->data())) return;
    const cudaError_t status = cudaHostRegister(staging->data(), staging->size(), cudaHostRegisterDefault);
    if (status == cudaErrorHostMemoryAlreadyRegistered) {
      (void)cudaGetLastError();  // not an error here: clear it from this thread's last error
      pinned_.emplace(staging->data(), nullptr);
      return;
    }
    check(status, "cudaHostRegister(staging buffer of " + key_text(partition) + ")");
    pinned_.emplace(staging->data(), staging);  // kept mapped until unregistered
  }

  // Never throws: the destructor's and a failed constructor's clean-up.
  void release() noexcept {
    if (device_ < 0) return;
    (void)cudaSetDevice(device_);
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    for (auto& [data, buffer] : pinned_)
      if (buffer) (void)cudaHostUnregister(buffer->data());
    pinned_.clear();
    for (float* allocation : memory_)
      if (allocation != nullptr) (void)cudaFree(allocation);
    memory_.clear();
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  const SyntheticWorkload& workload_;
  const int rank_;
  int device_ = -1;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  std::vector<float*> memory_;  // by SyntheticWorkload::index_of(key)
  std::mutex mutex_;
  // Registered staging buffers by address; null: another worker of this process registered it.
  std::map<const std::byte*, std::shared_ptr<ByteBuffer>> pinned_;
};

}  // namespace

namespace gpu {

Availability availability() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return {0, "cudaGetDeviceCount: " + status_text(status)};
  if (count <= 0) return {0, "cudaGetDeviceCount: no CUDA device visible"};
  return {count, ""};
}

std::unique_ptr<DeviceTensors> make_device_tensors(const SyntheticWorkload& workload, int rank) {
  return std::make_unique<CudaTensors>(workload, rank);
}

}  // namespace gpu
}  // namespace pstwin::cuda
