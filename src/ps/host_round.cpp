#include "ps/host_round.hpp"

#include <algorithm>
#include <stdexcept>

#include "ps/ids.hpp"

namespace pstwin {

HostRound::HostRound(const SyntheticWorkload& workload, const HostGroups& groups, int rank, int workers,
                     int iterations)
    : workload_(workload),
      groups_(groups),
      rank_(rank),
      root_(groups.root_of(rank)),
      workers_(workers),
      iterations_(iterations) {}

const PartitionSpec* HostRound::find_partition(std::uint64_t key) const {
  try {
    return &workload_.partition(key);
  } catch (const std::out_of_range&) {
    return nullptr;
  }
}

const PartitionSpec* HostRound::aggregate_partition(const Message& aggregate, std::string& error) const {
  const auto key = aggregate.header.key;
  const auto bytes = aggregate.payload.size();
  const PartitionSpec* partition = find_partition(key);
  if (partition && bytes == partition->bytes) return partition;
  error = "worker " + std::to_string(rank_) + " pulled " + std::to_string(bytes) + " bytes for key " +
          std::to_string(key) +
          (partition ? ", expected " + std::to_string(partition->bytes) : ", which no partition has");
  return nullptr;
}

std::string HostRound::stranger(const Message& message) const {
  const NodeId sender = message.header.sender;
  const int rank = rank_of(sender);
  if (role_of(sender) != Role::kWorker || rank < 0 || rank >= workers_ || groups_.root_of(rank) != root_ ||
      rank == rank_)
    return "not another worker of this host";
  return "";
}

bool HostRound::own_staged(const PartitionSpec& partition, std::uint32_t iteration) {
  const Slot slot{iteration, partition.key};
  pending_[slot].own_staged = true;
  return complete(slot);
}

HostRound::Ready HostRound::ready(const Message& request, std::uint32_t running) {
  if (!is_root())
    return {nullptr, "this worker is not its host's root (worker " + std::to_string(root_) + " is)"};
  const PartitionSpec* partition = find_partition(request.header.key);
  if (!partition) return {nullptr, "no partition has that key"};
  const std::uint32_t iteration = request.header.iteration;
  if (static_cast<int>(iteration) >= iterations_ || (iteration != running && iteration != running + 1))
    return {nullptr, "this worker runs iteration " + std::to_string(running)};
  const Slot slot{iteration, partition->key};
  auto& ready = pending_[slot].ready;
  const int rank = rank_of(request.header.sender);
  if (std::ranges::find(ready, rank) != ready.end())
    return {nullptr, "that worker's partition is staged already (a repeat)"};
  ready.push_back(rank);
  return {complete(slot) ? partition : nullptr, ""};
}

bool HostRound::complete(const Slot& slot) {
  const auto it = pending_.find(slot);
  if (it == pending_.end() || !it->second.own_staged ||
      it->second.ready.size() + 1 < groups_.members(root_).size())
    return false;
  pending_.erase(it);
  return true;
}

}  // namespace pstwin
