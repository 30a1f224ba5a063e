// Where a worker's tensors live before the copy-in (workload.device). With "cpu" a worker has none of
// this: SyntheticWorkload::fill writes straight into the staging buffer. With "cuda" the worker's
// values are in device memory and DeviceTensors moves them: produced on the device by the compute
// step, copied device -> host into the staging buffer by the copy step, and each pulled aggregate
// copied host -> device. Every call runs in an executor's `work` (a lane thread in the real backend)
// and returns when its copy is complete; a failure throws DeviceError naming the call.
//
// Protocol code sees only this interface: the CUDA implementation is its own library (src/cuda), handed
// to the roles by the real backends (zeno/roles.hpp JobRoles); the simulator uses EmulatedDevice, whose
// "device memory" is host memory, and charges the copies at cluster.pcie_bandwidth.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/payload.hpp"
#include "ps/keys.hpp"
#include "ps/workload.hpp"

namespace pstwin {

// A device call that failed: the message names the call and the device's own reason.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DeviceTensors {
 public:
  virtual ~DeviceTensors() = default;
  // One line for logs: "cuda:0 NVIDIA H100 80GB HBM3", "emulated GPU (host memory)".
  virtual std::string describe() const = 0;
  // The compute step: `iteration`'s values of `partition` (SyntheticWorkload::fill's, exactly) in device
  // memory. May return before the device finished; later copies of the partition wait for it.
  virtual void produce(const PartitionSpec& partition, std::uint32_t iteration) = 0;
  // The copy-in: the partition's device values into `staging` (the host staging region, partition.bytes;
  // registered as pinned memory on first use). Returns when the bytes are in `staging`.
  virtual void copy_out(const PartitionSpec& partition, const std::shared_ptr<ByteBuffer>& staging) = 0;
  // A pulled aggregate into the partition's device memory. Returns when the copy is complete.
  virtual void copy_in(const PartitionSpec& partition, std::span<const float> aggregate) = 0;
  // The partition's device values, copied back (tests and checks).
  virtual std::vector<float> read(const PartitionSpec& partition) = 0;
};

// Worker `rank`'s device tensors for `workload`; throws DeviceError when the device cannot be used.
using DeviceFactory =
    std::function<std::unique_ptr<DeviceTensors>(const SyntheticWorkload& workload, int rank)>;

// A GPU modelled in host memory: the simulator's device, and the reference the CUDA one must match.
class EmulatedDevice final : public DeviceTensors {
 public:
  EmulatedDevice(const SyntheticWorkload& workload, int rank);
  std::string describe() const override { return "emulated GPU (host memory)"; }
  void produce(const PartitionSpec& partition, std::uint32_t iteration) override;
  void copy_out(const PartitionSpec& partition, const std::shared_ptr<ByteBuffer>& staging) override;
  void copy_in(const PartitionSpec& partition, std::span<const float> aggregate) override;
  std::vector<float> read(const PartitionSpec& partition) override;

 private:
  std::vector<float>& memory(const PartitionSpec& partition);

  const SyntheticWorkload& workload_;
  const int rank_;
  std::vector<std::vector<float>> memory_;  // by SyntheticWorkload::index_of(key)
};

}  // namespace pstwin
