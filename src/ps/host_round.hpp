// What both local reduces (HostReduce for ps.local_reduce = "shm", DeviceReduce for "nccl") do alike
// on one worker: check who a local_reduce message comes from, and on the host's root count, per
// (iteration, key), its own partition and the readies of the host's other workers until the host's
// round of that partition is complete.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/message.hpp"
#include "ps/host_groups.hpp"
#include "ps/workload.hpp"

namespace pstwin {

class HostRound {
 public:
  // `workload` and `groups` must outlive this object. `workers`, `iterations`: the job's.
  HostRound(const SyntheticWorkload& workload, const HostGroups& groups, int rank, int workers,
            int iterations);

  int root() const { return root_; }
  bool is_root() const { return root_ == rank_; }
  const PartitionSpec* find_partition(std::uint64_t key) const;  // null: no partition has it
  // Root: the partition a pulled aggregate is of, or null with `error` saying why the run must fail: no
  // partition has its key, or it is not that partition's size (the host's buffers hold the partition,
  // so such a reply could not be handed on, nor trusted).
  const PartitionSpec* aggregate_partition(const Message& aggregate, std::string& error) const;
  // "" when `message` comes from another worker of this host, else why it is to be ignored.
  std::string stranger(const Message& message) const;
  // Root: its own partition of `iteration` is staged. True when that completes the host's round of it.
  bool own_staged(const PartitionSpec& partition, std::uint32_t iteration);
  // Root: another worker's request saying its partition `key` of `iteration` is staged, while this
  // worker runs iteration `running`. `ignored`: why it was not taken (not the root, no such key, an
  // iteration not due, a repeat); `complete`: the partition whose host round it completed.
  struct Ready {
    const PartitionSpec* complete = nullptr;
    std::string ignored;
  };
  Ready ready(const Message& request, std::uint32_t running);
  std::size_t waiting() const { return pending_.size(); }  // root: partitions not yet complete

 private:
  struct Pending {
    bool own_staged = false;
    std::vector<int> ready;  // ranks of the other workers whose partition is staged
  };
  using Slot = std::pair<std::uint32_t, std::uint64_t>;  // (iteration, key)
  bool complete(const Slot& slot);

  const SyntheticWorkload& workload_;
  const HostGroups& groups_;
  const int rank_;
  const int root_;
  const int workers_;
  const int iterations_;
  std::map<Slot, Pending> pending_;
};

}  // namespace pstwin
