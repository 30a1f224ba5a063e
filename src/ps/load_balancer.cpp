#include "ps/load_balancer.hpp"

#include <algorithm>
#include <sstream>

#include "core/codec.hpp"
#include "ps/ids.hpp"

namespace pstwin {

LoadBalancer::LoadBalancer(const Scenario& scenario, std::span<const PartitionSpec> partitions)
    : scenario_(scenario),
      partitions_(partitions),
      servers_(scenario.roles.servers),
      workers_(scenario.roles.workers),
      rates_(static_cast<std::size_t>(scenario.roles.servers), 0.0) {
  const DecisionBook start(partitions, servers_);
  for (std::uint32_t i = 0; i < kDecisionLag; ++i) decisions_[i] = *start.find(i);
}

std::optional<LbDecision> LoadBalancer::add_report(NodeId from, const LbReport& report, std::string& error) {
  const auto it = decisions_.find(report.iteration);
  if (it == decisions_.end()) {
    error = "report.iteration: " + std::to_string(report.iteration) + " has no decision (node " +
            std::to_string(from) + ")";
    return std::nullopt;
  }
  const Role role = role_of(from);
  if (role == Role::kServer && it->second.partitions_of(rank_of(from)) == 0) {
    error = "report from server " + std::to_string(rank_of(from)) + " for iteration " +
            std::to_string(report.iteration) + ", in which it owned no partition";
    return std::nullopt;
  }
  auto& got = reports_[report.iteration];
  got[from] = report;
  // Expected: every worker, and every server that owned partitions in that iteration.
  std::size_t expected = static_cast<std::size_t>(workers_);
  for (int s = 0; s < servers_; ++s)
    if (it->second.partitions_of(s) > 0) ++expected;
  if (got.size() < expected) return std::nullopt;
  const std::uint32_t next = report.iteration + kDecisionLag;
  // Measurements of the finished iteration: each server that owned partitions is measured anew.
  for (const auto& [node, r] : got)
    if (role_of(node) == Role::kServer)
      rates_[static_cast<std::size_t>(rank_of(node))] = r.receive_rate_Bps();
  reports_.erase(report.iteration);
  if (static_cast<int>(next) >= scenario_.workload.iterations) return std::nullopt;
  return decisions_[next] = decide(next);
}

double LoadBalancer::predicted_time(const std::vector<std::int32_t>& owner) const {
  std::vector<double> bytes(rates_.size(), 0);
  for (std::size_t i = 0; i < owner.size(); ++i)
    bytes[static_cast<std::size_t>(owner[i])] += static_cast<double>(partitions_[i].bytes + kHeaderBytes);
  double worst = 0;
  for (std::size_t s = 0; s < bytes.size(); ++s)
    if (bytes[s] > 0) worst = std::max(worst, bytes[s] / rates_[s]);
  return worst;
}

LbDecision LoadBalancer::decide(std::uint32_t next) {
  const LbDecision& now = current();
  auto version_for = [&](const std::vector<std::int32_t>& owner) {
    return owner == now.owner ? now.version : now.version + 1;
  };
  auto probe = [&](std::string reason) {
    LbDecision d = probe_decision(partitions_, servers_, next, 0, std::move(reason));
    d.version = version_for(d.owner);
    return d;
  };
  const auto& asked = scenario_.lb.probe_at;
  if (std::find(asked.begin(), asked.end(), next) != asked.end()) return probe("asked (lb.probe_at)");
  for (int s = 0; s < servers_; ++s)
    if (!(rates_[static_cast<std::size_t>(s)] > 0))
      return probe("measurement missing or zero for server " + std::to_string(s));
  LbDecision d;
  d.iteration = next;
  d.owner = assign_proportional(partitions_, rates_);
  const double keep = predicted_time(now.owner), fresh = predicted_time(d.owner);
  if (!now.probe && keep <= fresh * (1 + scenario_.lb.rebalance_threshold)) {
    d.owner = now.owner;
    d.reason = "unchanged: the measured split is not faster by lb.rebalance_threshold";
  } else {
    std::ostringstream why;
    why << "measured: shares proportional to server receive rates (Bps)";
    for (double r : rates_) why << " " << static_cast<std::uint64_t>(r);
    d.reason = why.str();
  }
  d.version = version_for(d.owner);
  return d;
}

}  // namespace pstwin
