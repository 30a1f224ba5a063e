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
// ps.local_reduce = "nccl" adds DeviceGroup: the devices of one host's workers as one group (an NCCL
// communicator in the CUDA build, EmulatedGroups in the simulator), which sums the members' tensors into
// the root's device memory and broadcasts the pulled aggregate back (ps/device_reduce.hpp drives it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/payload.hpp"
#include "core/runtime.hpp"
#include "ps/keys.hpp"
#include "ps/workload.hpp"

namespace pstwin {

// A device call that failed: the message names the call and the device's own reason.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DeviceGroup;

// A group's id as the host's root hands it to the other members: NCCL_UNIQUE_ID_BYTES (an ncclUniqueId),
// and as many for the emulated group, so both backends send the same bytes.
inline constexpr std::size_t kDeviceGroupIdBytes = 128;

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

  // ps.local_reduce = "nccl". The host's root: a new group's id (ncclGetUniqueId), to hand the host's
  // other workers. Every member then joins it with its index (the host's workers in rank order, the
  // root 0) and their number; join_group returns once every member joined (ncclCommInitRank). The
  // group must not outlive these tensors.
  virtual std::vector<std::byte> new_group_id() = 0;
  virtual std::unique_ptr<DeviceGroup> join_group(std::span<const std::byte> id, int member, int members) = 0;
};

// One member's handle on its host's device group. Every member calls the same collectives in the same
// order (the root decides it, ps/device_reduce.hpp); each call returns when this member's part is done
// (on the root: the result is complete). Member 0, the root, also holds a sum buffer per partition, out
// of place so that its own values stay its contribution until the aggregate comes back.
class DeviceGroup {
 public:
  virtual ~DeviceGroup() = default;
  // One line for logs: "nccl 4 ranks, rank 1 on cuda:1", "emulated group of 4, member 1".
  virtual std::string describe() const = 0;
  // Every member's values of `partition` summed, by member, into the root's sum buffer (ncclReduce).
  virtual void reduce(const PartitionSpec& partition) = 0;
  // The root's sum buffer into every member's values of `partition`, the root's own too (ncclBroadcast).
  virtual void broadcast(const PartitionSpec& partition) = 0;
  // The root: its sum buffer into `staging` (device -> host), and a pulled aggregate into it (host ->
  // device), as DeviceTensors::copy_out and copy_in do for the values.
  virtual void copy_out_sum(const PartitionSpec& partition, const std::shared_ptr<ByteBuffer>& staging) = 0;
  virtual void copy_in_sum(const PartitionSpec& partition, std::span<const float> aggregate) = 0;
};

// Device work on an executor lane: an exception its `work` throws (a CUDA or NCCL error) fails the run
// with "`who`: what" instead of running `done`, so a device error is never a crash.
void submit_device_work(Runtime& runtime, Executor& stage, std::string_view label, ComputeCost cost,
                        std::function<void()> work, std::function<void()> done, std::string who,
                        std::optional<SpanTags> tags = std::nullopt);

// Worker `rank`'s device tensors for `workload`; throws DeviceError when the device cannot be used.
using DeviceFactory =
    std::function<std::unique_ptr<DeviceTensors>(const SyntheticWorkload& workload, int rank)>;

// workload.kind = "mlp" with workload.device = "cuda": a worker's MLP step (forward, softmax
// cross-entropy and the batch-mean gradient) on the device. The model is train::Mlp's, given by its
// layer sizes; the flat parameter and gradient layout is Mlp's (W1, b1, W2, b2, ... with W_l row-major
// [out][in]), so the pushed bytes are the same whichever computes them. The CUDA implementation
// (cuda/cuda_mlp.cpp) lives below the training layer without knowing it; the simulator has none and
// computes on the CPU. A failed call throws DeviceError naming it.
class DeviceMlpStep {
 public:
  virtual ~DeviceMlpStep() = default;
  // One line for logs: "cuda:0 NVIDIA H100 80GB HBM3 (cuBLAS)".
  virtual std::string describe() const = 0;
  // Mlp::loss_and_gradient's contract: the batch's mean cross-entropy, its gradient written into `grad`
  // (x: batch x inputs, sample after sample; y: labels; 1 to max_batch samples).
  virtual double loss_and_gradient(std::span<const float> params, std::span<const float> x,
                                   std::span<const std::uint8_t> y, std::span<float> grad) = 0;
};

// Worker `rank`'s MLP step for a model of `layers` (input, hidden..., classes) and batches of up to
// `max_batch` samples; throws DeviceError when the device cannot be used.
using MlpStepFactory = std::function<std::unique_ptr<DeviceMlpStep>(std::span<const std::size_t> layers,
                                                                    std::size_t max_batch, int rank)>;

class EmulatedDevice;

// The simulator's device groups: every worker of the job runs in its one process, so a group is a table
// of its members' EmulatedDevices (its id names the entry) and each collective moves host memory. Each
// member's call moves only what that member's own NCCL call would receive: the root's reduce reads the
// others' values, a member's broadcast reads the root's sum buffer. That is exact whatever order the
// simulator runs the members' calls in, because the protocol keeps both inputs still until every member
// is past the collective (ps/device_reduce.hpp).
class EmulatedGroups : public std::enable_shared_from_this<EmulatedGroups> {
 public:
  std::vector<std::byte> new_id();
  // Member `member` of group `id` (made by new_id) is `device`; throws DeviceError for an unknown id, a
  // member out of range or one that joined already.
  std::unique_ptr<DeviceGroup> join(EmulatedDevice& device, std::span<const std::byte> id, int member,
                                    int members);

 private:
  struct Group {
    std::vector<EmulatedDevice*> members;              // null until that member joins
    std::map<std::uint64_t, std::vector<float>> sums;  // the root's sum buffers, by key
  };
  friend class EmulatedMember;
  std::map<std::vector<std::byte>, Group> groups_;
  std::uint64_t next_ = 0;
};

// A GPU modelled in host memory: the simulator's device, and the reference the CUDA one must match.
class EmulatedDevice final : public DeviceTensors {
 public:
  // `groups`: where ps.local_reduce = "nccl" forms its groups (null: this device joins none).
  EmulatedDevice(const SyntheticWorkload& workload, int rank,
                 std::shared_ptr<EmulatedGroups> groups = nullptr);
  std::string describe() const override { return "emulated GPU (host memory)"; }
  void produce(const PartitionSpec& partition, std::uint32_t iteration) override;
  void copy_out(const PartitionSpec& partition, const std::shared_ptr<ByteBuffer>& staging) override;
  void copy_in(const PartitionSpec& partition, std::span<const float> aggregate) override;
  std::vector<float> read(const PartitionSpec& partition) override;
  std::vector<std::byte> new_group_id() override;
  std::unique_ptr<DeviceGroup> join_group(std::span<const std::byte> id, int member, int members) override;

 private:
  friend class EmulatedMember;
  std::vector<float>& memory(const PartitionSpec& partition);

  const SyntheticWorkload& workload_;
  const int rank_;
  std::shared_ptr<EmulatedGroups> groups_;
  std::vector<std::vector<float>> memory_;  // by SyntheticWorkload::index_of(key)
};

}  // namespace pstwin
