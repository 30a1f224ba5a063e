// ps.local_reduce = "shm" on one worker (BytePS's hierarchical mode): the workers of a host (HostGroups)
// stage each partition in host shared memory (Runtime::staging()) and tell the host's root with a
// local_reduce request; the root sums the host's partitions by rank into its own staging buffer and
// pushes that one sum for the host. When the aggregate comes back the root writes it to a shared
// buffer of the host and answers each request (a local_reduce response); each worker reads it there
// as its pull. Only the root's push and pull cross hosts.
// The shared buffers are safe without locks: a worker writes its buffer for iteration i + 1 only after
// the aggregate of i came back, which the root answers after its sum of i read the buffer; the root
// writes the aggregate of i + 1 only after every worker's request of i + 1, sent after it read i's.
// The simulator charges the intra-host copies (the root's reads of the others' partitions, its write
// of the aggregate, each worker's read of it) at cluster.intra_host_bandwidth; the real backend's
// copies take what the memory gives.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime.hpp"
#include "ps/host_groups.hpp"
#include "ps/host_round.hpp"
#include "ps/role_options.hpp"
#include "ps/workload.hpp"

namespace pstwin {

class HostReduce {
 public:
  struct Hooks {
    // Writes this worker's values of (partition, iteration) into the buffer given.
    std::function<void(const PartitionSpec&, std::uint32_t, std::span<float>)> fill;
    // Root: the host's sum of a partition, to push to the servers (`buffer`: its staging buffer's name).
    std::function<void(const PartitionSpec&, Payload, std::string buffer)> push;
    // Not the root: the host's aggregate of a partition, as this worker's pull response of it.
    std::function<void(Message)> deliver;
  };

  // `groups`, `workload` and the executors must outlive this object. `rank` must share its host with
  // another worker (a lone root pushes as a plain worker does).
  HostReduce(Runtime& runtime, HostReduceOptions options, const SyntheticWorkload& workload,
             const HostGroups& groups, int rank, Executor& copy_stage, Executor& reduce_stage, Hooks hooks);

  bool is_root() const { return round_.is_root(); }
  // The iteration the worker runs (requests of it and of the next are accepted).
  void set_iteration(std::uint32_t iteration) { iteration_ = iteration; }
  // This worker's partition of `iteration` is computed: stage it and hand it to the root.
  void stage(const PartitionSpec& partition, std::uint32_t iteration);
  // Root: the servers' aggregate of a partition (a pull response): shared with the host's workers.
  // False (and the run failed) for one that is not the partition's size.
  bool share(const Message& aggregate);
  // A local_reduce message from another worker of the host. One that does not fit (a stranger's, a
  // key not in the model, an iteration not running, a repeat) is logged and ignored.
  void on_message(const Message& message);
  std::string describe() const;

 private:
  void on_ready(const Message& request);
  void on_aggregate(const Message& response);
  void reduce(const PartitionSpec& partition, std::uint32_t iteration);  // the host's round is complete
  std::shared_ptr<ByteBuffer> buffer(const std::string& name, std::uint64_t bytes);
  std::string input_name(int rank, std::uint64_t key) const;
  std::string aggregate_name(std::uint64_t key) const;
  Seconds intra_host_seconds(std::uint64_t bytes) const;
  void ignore(const Message& message, const std::string& why);

  Runtime& rt_;
  const HostReduceOptions options_;
  const SyntheticWorkload& workload_;
  const HostGroups& groups_;
  const int rank_;
  const int root_;
  Executor& copy_stage_;
  Executor& reduce_stage_;
  Hooks hooks_;
  std::uint32_t iteration_ = 0;
  HostRound round_;                                  // root: partitions not yet summed
  std::map<std::uint64_t, std::uint32_t> awaiting_;  // not the root: key -> iteration staged, no aggregate
  std::map<std::string, std::shared_ptr<ByteBuffer>> buffers_;  // by name: mapped once, reused
};

}  // namespace pstwin
