#include "realnet/node_faults.hpp"

#include <sstream>

#include "ps/ids.hpp"

namespace pstwin::realnet {

NodeFaults::NodeFaults(const Scenario& scenario, bool kernel_partitions)
    : scenario_(scenario), faults_(scenario.faults), plan_(faults_) {
  if (kernel_partitions)
    std::erase_if(faults_.partitions, [](const PartitionFault& p) { return !p.side.hosts.empty(); });
  nodes_[kSchedulerId] = {"scheduler", scenario.scheduler_host_name()};
  for (int r = 0; r < scenario.roles.servers; ++r)
    nodes_[server_id(r)] = {"server " + std::to_string(r), scenario.server_host_name(r)};
  for (int r = 0; r < scenario.roles.workers; ++r)
    nodes_[worker_id(r)] = {"worker " + std::to_string(r), scenario.worker_host_name(r)};
  for (int r = 0; r < scenario.roles.validators; ++r)
    nodes_[validator_id(r)] = {"validator " + std::to_string(r), scenario.validator_host_name(r)};
}

std::optional<FaultEndpoint> NodeFaults::endpoint(NodeId id) const {
  const auto it = nodes_.find(id);
  if (it == nodes_.end()) return std::nullopt;
  return FaultEndpoint{it->second.first, it->second.second};
}

std::string_view NodeFaults::name_of(NodeId id) const {
  const auto it = nodes_.find(id);
  return it == nodes_.end() ? std::string_view() : std::string_view(it->second.first);
}

std::string NodeFaults::describe(NodeId id, std::string_view name) {
  return name.empty() ? "node " + std::to_string(id) : std::string(name);
}

NodeFaults::Verdict NodeFaults::on_receipt(
    const MessageHeader& header, Seconds job_time,
    const std::function<RandomStream&(std::string_view)>& random) const {
  const auto from = endpoint(header.sender);
  const auto to = endpoint(header.recipient);
  if (!from || !to) return {};
  // As the simulator's Stream: a partition first, then loss and duplication; a clog holds what would
  // have crossed during it (the simulator holds it at the sender, before it crosses).
  if (plan_.partitioned(job_time, *from, *to)) return {Fate::kPartitioned};
  if (const Seconds release = plan_.clog_release(job_time, *from, *to); release > job_time)
    return {Fate::kHold, release};
  switch (plan_.fate(header, random)) {
    case FaultPlan::Fate::kLose:
      return {Fate::kLose};
    case FaultPlan::Fate::kDuplicate:
      return {Fate::kDuplicate};
    case FaultPlan::Fate::kDeliver:
      break;
  }
  return {};
}

double NodeFaults::slow_factor(Seconds job_time, NodeId self) const {
  if (scenario_.faults.slow.empty()) return 1;
  const auto name = name_of(self);
  return name.empty() ? 1 : plan_.slow_factor(job_time, name);
}

std::vector<std::pair<std::string, Seconds>> NodeFaults::timed_crashes() const {
  std::vector<std::pair<std::string, Seconds>> timed;
  for (const auto& crash : scenario_.faults.crashes)
    if (!(crash.iteration && *crash.iteration > 0)) timed.emplace_back(crash.node, crash.at_s.value_or(0));
  return timed;
}

CrashObserver::CrashObserver(const Scenario& scenario, std::function<void(int worker)> crash)
    : crash_(std::move(crash)), continues_on_loss_(scenario.ps.continues_on_worker_loss()) {
  for (const auto& c : scenario.faults.crashes)
    if (c.iteration && *c.iteration > 0 && c.node.starts_with("worker "))
      at_.emplace(std::stoi(c.node.substr(7)), *c.iteration - 1);
}

void CrashObserver::iteration_done(int worker, std::uint32_t iteration, Seconds /*start*/, Seconds /*end*/) {
  if (at_.contains({worker, iteration})) crash_(worker);
}

void CrashObserver::worker_lost(int worker, Seconds at) {
  std::lock_guard lock(mutex_);
  if (!reported_.insert(worker).second) return;  // the scheduler and every node tell it
  std::ostringstream out;
  out << "worker " << worker << " at " << at << " s";
  lost_.push_back(out.str());
}

std::vector<std::string> CrashObserver::lost() const {
  std::lock_guard lock(mutex_);
  return lost_;
}

}  // namespace pstwin::realnet
