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
      worker_aggregators_(scenario.lb.worker_aggregators),
      rates_(static_cast<std::size_t>(aggregator_slots(scenario)), 0.0) {
  const DecisionBook start(partitions, servers_, worker_aggregators_ ? workers_ : 0);
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
  // A worker is measured only where it aggregated: its pull responses alone need not fill its link.
  for (const auto& [node, r] : got) {
    const int slot = slot_of(node, servers_);
    if (role_of(node) == Role::kServer || (worker_aggregators_ && it->second.partitions_of(slot) > 0))
      rates_[static_cast<std::size_t>(slot)] = r.receive_rate_Bps();
  }
  reports_.erase(report.iteration);
  if (static_cast<int>(next) >= scenario_.workload.iterations) return std::nullopt;
  return decisions_[next] = decide(next);
}

double LoadBalancer::predicted_time(const std::vector<std::int32_t>& owner) const {
  std::vector<double> bytes(rates_.size(), 0);
  double model = 0;
  for (std::size_t i = 0; i < owner.size(); ++i) {
    bytes[static_cast<std::size_t>(owner[i])] += static_cast<double>(partitions_[i].bytes + kHeaderBytes);
    model += static_cast<double>(partitions_[i].bytes + kHeaderBytes);
  }
  double worst = 0;
  for (std::size_t s = 0; s < bytes.size(); ++s) {
    if (static_cast<int>(s) >= servers_) {
      // A worker's link: its pushes and pulls of what others aggregate, and the other workers'
      // traffic for its own range (rates are per link, so servers' n x bytes share the scale).
      const double link = model - bytes[s] + (workers_ - 1) * bytes[s];
      worst = std::max(worst, link / rates_[s]);
    } else if (bytes[s] > 0) {
      worst = std::max(worst, (worker_aggregators_ ? workers_ : 1) * bytes[s] / rates_[s]);
    }
  }
  return worst;
}

std::vector<double> LoadBalancer::target_shares() const {
  double model = 0, largest = 0;
  for (const auto& p : partitions_) {
    model += static_cast<double>(p.bytes + kHeaderBytes);
    largest = std::max(largest, static_cast<double>(p.bytes + kHeaderBytes));
  }
  const auto rates = std::span(rates_);
  return optimal_split(rates.first(static_cast<std::size_t>(servers_)),
                       rates.subspan(static_cast<std::size_t>(servers_)), model, largest)
      .shares;
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
  for (int w = 0; worker_aggregators_ && w < workers_; ++w)
    if (!(rates_[static_cast<std::size_t>(servers_ + w)] > 0)) {
      LbDecision d =
          worker_probe_decision(partitions_, servers_, workers_, next, 0,
                                "measurement missing or zero for worker aggregator " + std::to_string(w));
      d.version = version_for(d.owner);
      return d;
    }
  LbDecision d;
  d.iteration = next;
  d.owner = assign_proportional(partitions_, worker_aggregators_ ? target_shares() : rates_);
  const double keep = predicted_time(now.owner), fresh = predicted_time(d.owner);
  if (!now.probe && keep <= fresh * (1 + scenario_.lb.rebalance_threshold)) {
    d.owner = now.owner;
    d.reason = "unchanged: the measured split is not faster by lb.rebalance_threshold";
  } else {
    std::ostringstream why;
    why << (worker_aggregators_
                ? "measured: shares of servers and worker aggregators from their receive rates (Bps)"
                : "measured: shares proportional to server receive rates (Bps)");
    for (double r : rates_) why << " " << static_cast<std::uint64_t>(r);
    d.reason = why.str();
  }
  d.version = version_for(d.owner);
  return d;
}

}  // namespace pstwin
