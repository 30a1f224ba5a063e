// The scheduler's load-balancing app (FPT's LBScheduler), as pure logic: it collects every node's
// measurements of an iteration and decides who aggregates which partition in the next one.
//  - probe state (equal split) at iteration 0, when asked (lb.probe_at), and whenever a server's
//    bandwidth is unknown: its measurement missing or zero (FPT v2.5's open question 3);
//  - otherwise partitions go to servers in proportion to their measured receive rates
//    (assign_proportional), kept unless a new split is predicted lb.rebalance_threshold faster;
//  - lb.worker_aggregators: workers are aggregator slots too, measured in the workers' probe
//    (iteration 1, or whenever a worker's rate is missing) and in every iteration they own a range;
//    the shares are optimal_split's (every server and worker link finishes at once).
// A decision for iteration i+2 is made once the reports of iteration i are all in: every worker's,
// and every server's that owned partitions in iteration i (it reports once all its pushes arrived).
// Deciding two ahead, not one, keeps the decision off the critical path: a worker that finishes
// iteration i+1 finds i+2's decision waiting instead of waiting for the slowest worker's report of i+1
// (a barrier per iteration that idled every link while the last pulls drained).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "ps/balance.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

class LoadBalancer {
 public:
  LoadBalancer(const Scenario& scenario, std::span<const PartitionSpec> partitions);

  // A report of node `from`; the decision for the next iteration once the iteration is complete
  // (nothing after the last iteration). A report for an unknown iteration or node is an error (text).
  std::optional<LbDecision> add_report(NodeId from, const LbReport& report, std::string& error);

  const LbDecision& current() const { return decisions_.rbegin()->second; }  // the latest made
  const std::map<std::uint32_t, LbDecision>& decisions() const { return decisions_; }
  // Receive rate per aggregator slot last measured (0: unknown): servers, then worker aggregators.
  const std::vector<double>& rates() const { return rates_; }

 private:
  LbDecision decide(std::uint32_t next);
  double predicted_time(const std::vector<std::int32_t>& owner) const;
  std::vector<double> target_shares() const;  // worker aggregators: optimal_split of the measured rates

  const Scenario& scenario_;
  std::span<const PartitionSpec> partitions_;
  int servers_;
  int workers_;
  bool worker_aggregators_;
  std::map<std::uint32_t, LbDecision> decisions_;  // by iteration
  std::map<std::uint32_t, std::map<NodeId, LbReport>> reports_;
  std::vector<double> rates_;
};

}  // namespace pstwin
