// ps.local_reduce = "nccl" on one worker (BytePS's hierarchical mode between the GPUs of a host): the
// workers of a host (HostGroups) form one device group (ps/device.hpp DeviceGroup: an NCCL communicator
// on GPUs, EmulatedGroups in the simulator). Per partition the host's workers sum their device tensors
// into the root's device memory (ncclReduce), the root copies the sum device -> host into its staging
// buffer and pushes it for the host; on the pull it copies the aggregate host -> device and broadcasts
// it into every member's tensors (ncclBroadcast). Only the root's push and pull cross hosts, and no
// other worker copies anything over PCIe.
//
// Every member must call the collectives in one order, so the root decides it, as BytePS's NCCL
// manager does: another worker tells the root when its partition is on its device (a header-only
// local_reduce request), and the root, once it has every member's and its own, sends each member the
// next collective (a local_reduce response whose header.partition says which, DeviceReduceOp) and
// queues its own. Every worker runs its collectives on one lane in the order they came; the runtime's
// ordered stream from the root keeps that order the root's. The group's id goes the same way: created by
// the root, sent to each member as a local_reduce response carrying its bytes. A message rather than
// the host's shared staging memory because a member must learn when the id is there anyway (protocol
// code cannot poll), one message says both, and both backends send it alike; a worker tells the root
// its partitions are ready only once it joined, so every collective the root starts has all members.
//
// The inputs stay still until every member is past each collective, without locks: a worker's values of
// (partition, i) change next by the broadcast of i, which the root starts only after the push its
// reduce made; the root's sum buffer of it changes next by the reduce of i + 1, which needs every
// member's ready of i + 1, sent only after that member's broadcast of i. So the emulated group, whose
// calls read the other members' memory, is exact in whatever order the simulator runs them.
//
// The simulator charges the reduce and the broadcast at cluster.intra_host_bandwidth on each member's
// collective lane (a ring moves each partition once over every member's link: NCCL's bus bandwidth of
// Reduce and Broadcast is their algorithm bandwidth), and the root's device -> host and host -> device
// copies at cluster.pcie_bandwidth on its copy lane; the kernel producing the values is not charged,
// as on the device path. The real backend's calls take their own time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime.hpp"
#include "ps/device.hpp"
#include "ps/host_groups.hpp"
#include "ps/host_round.hpp"
#include "ps/role_options.hpp"
#include "ps/workload.hpp"

namespace pstwin {

// What a local_reduce message means in "nccl" mode, in its header.partition.
enum class DeviceReduceOp : std::uint32_t {
  kReady = 0,      // request, a member -> its root: my values of `key`, `iteration` are on my device
  kGroupId = 1,    // response, root -> member: the payload is the group's id; join it
  kReduce = 2,     // response, root -> member: reduce `key` of `iteration` now
  kBroadcast = 3,  // response, root -> member: take the broadcast of `key`'s aggregate of `iteration` now
};

class DeviceReduce {
 public:
  struct Hooks {
    // Root: the host's sum of a partition in its staging buffer, to push (`buffer`: the buffer's name).
    std::function<void(const PartitionSpec&, Payload, std::string buffer)> push;
    // The aggregate of a partition is in this worker's device tensors: its pull is done. The root gets
    // its pull response back; another worker the aggregate read back from its device (the checks').
    std::function<void(Message)> deliver;
  };

  // `groups`, `workload`, `device` and the executors must outlive this object. `rank` must share its host
  // with another worker (a lone root pushes as a plain worker does).
  DeviceReduce(Runtime& runtime, HostReduceOptions options, const SyntheticWorkload& workload,
               const HostGroups& groups, int rank, DeviceTensors& device, Executor& copy_stage,
               Executor& collective_stage, Hooks hooks);

  bool is_root() const { return round_.is_root(); }
  // The root: make the group's id, hand it to the host's workers and join. Once, when the node runs.
  void start();
  // The iteration the worker runs (readies of it and of the next are accepted).
  void set_iteration(std::uint32_t iteration) { iteration_ = iteration; }
  // This worker computed `iteration`'s values of `partition`: produce them on the device for the group.
  void stage(const PartitionSpec& partition, std::uint32_t iteration);
  // Root: the servers' aggregate of a partition (a pull response): to every member's device. False
  // (and the run failed) for one that is not the partition's size.
  bool share(Message aggregate);
  // A local_reduce message from another worker of the host. One that does not fit (a stranger's, a
  // key not in the model, an iteration or collective not due, a repeat) is logged and ignored.
  void on_message(const Message& message);
  std::string describe() const;

 private:
  void on_ready(const Message& request);
  void on_group_id(const Message& response);
  void on_collective(const Message& response, DeviceReduceOp op);
  void join(std::vector<std::byte> id);
  void send_ready(std::uint64_t key, std::uint32_t iteration);
  void start_reduce(const PartitionSpec& partition, std::uint32_t iteration);  // the host's round is complete
  void tell_members(DeviceReduceOp op, std::uint64_t key, std::uint32_t iteration, Payload payload = {});
  // This worker's part of a reduce or a broadcast, queued on the collective lane.
  void collective(DeviceReduceOp op, const PartitionSpec& partition, std::uint32_t iteration,
                  std::function<void()> done);
  // A device step (submit_device_work): an error fails the run naming this worker and its device.
  void submit(Executor& stage, std::string_view label, Seconds device_seconds, std::function<void()> work,
              std::function<void()> done, SpanTags tags);
  Seconds intra_host_seconds(std::uint64_t bytes) const;
  Seconds pcie_seconds(std::uint64_t bytes) const;
  std::string sum_name(std::uint64_t key) const;
  void ignore(const Message& message, const std::string& why);

  Runtime& rt_;
  const HostReduceOptions options_;
  const SyntheticWorkload& workload_;
  const HostGroups& groups_;
  const int rank_;
  const int root_;
  const int member_;  // this worker's index in its host's group (the root: 0)
  DeviceTensors& device_;
  Executor& copy_stage_;
  Executor& collective_stage_;
  Hooks hooks_;
  std::uint32_t iteration_ = 0;
  // Set by the join's work on the collective lane, used by the later collectives' work on that lane.
  std::unique_ptr<DeviceGroup> group_;
  bool joining_ = false;  // a group id came (another worker) or was made (the root)
  bool joined_ = false;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> held_;  // readies produced before the join, in order
  HostRound round_;                                            // root: partitions not yet reduced
  std::map<std::uint64_t, std::uint32_t> produced_;            // not the root: key -> iteration on the device
  std::map<std::uint64_t, std::uint32_t> reduced_;  // not the root: key -> iteration reduced, no aggregate
  std::map<std::uint64_t, std::shared_ptr<ByteBuffer>> staging_;  // root: key -> its sum's staging buffer
};

}  // namespace pstwin
