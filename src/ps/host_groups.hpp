// ps.local_reduce's groups: which workers share a host (the scenario's placement, roles.worker_hosts)
// and which of them pushes and pulls for it: its lowest rank, the root. Every node derives the same
// groups from the scenario, so a server knows how many pushes each round gets without a message.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

class HostGroups {
 public:
  explicit HostGroups(const Scenario& scenario);

  bool active() const { return active_; }  // false: ps.local_reduce = "none", every worker its own root
  int root_of(int worker) const;           // -1 for a rank the scenario has no worker of
  bool is_root(int worker) const { return worker >= 0 && root_of(worker) == worker; }
  // The workers the root `root` pushes for, ascending (the root first); {root} when inactive.
  std::span<const int> members(int root) const;
  // The pushes a key gets per round: one per root.
  int pushers() const { return static_cast<int>(roots_.size()); }
  std::span<const int> roots() const { return roots_; }

 private:
  bool active_;
  std::vector<int> root_of_;                 // by worker rank
  std::vector<int> roots_;                   // ascending
  std::map<int, std::vector<int>> members_;  // by root
};

// The scenario host node `id` runs on (as placed by roles.*_host(s)); "" for an id no node of the
// scenario has (a registrant, a forged id).
std::string node_host(const Scenario& scenario, NodeId id);

}  // namespace pstwin
