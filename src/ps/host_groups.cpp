#include "ps/host_groups.hpp"

#include "core/assert.hpp"
#include "ps/ids.hpp"

namespace pstwin {

HostGroups::HostGroups(const Scenario& scenario) : active_(scenario.ps.local_reduce != LocalReduce::kNone) {
  const int workers = scenario.roles.workers;
  std::map<std::string, int> root_by_host;
  for (int w = 0; w < workers; ++w) {
    // Ranks ascend, so the first worker seen on a host is its lowest rank.
    const auto [it, first] = root_by_host.try_emplace(active_ ? scenario.worker_host_name(w) : "", w);
    const int root = active_ ? it->second : w;
    root_of_.push_back(root);
    if (root == w) roots_.push_back(w);
    members_[root].push_back(w);
  }
}

int HostGroups::root_of(int worker) const {
  if (worker < 0 || static_cast<std::size_t>(worker) >= root_of_.size()) return -1;
  return root_of_[static_cast<std::size_t>(worker)];
}

std::span<const int> HostGroups::members(int root) const {
  const auto it = members_.find(root);
  PSTWIN_ASSERT(it != members_.end(), "worker " + std::to_string(root) + " is no host's root");
  return it->second;
}

std::string node_host(const Scenario& scenario, NodeId id) {
  if (id == kSchedulerId) return scenario.scheduler_host_name();
  if (id == kNoNode || id >= kRegistrantIdBase) return "";
  const int rank = rank_of(id);
  if (rank < 0) return "";
  switch (role_of(id)) {
    case Role::kServer:
      return rank < scenario.roles.servers ? scenario.server_host_name(rank) : "";
    case Role::kWorker:
      return rank < scenario.roles.workers ? scenario.worker_host_name(rank) : "";
    case Role::kValidator:
      return rank < scenario.roles.validators ? scenario.validator_host_name(rank) : "";
    case Role::kScheduler:
      break;
  }
  return "";
}

}  // namespace pstwin
