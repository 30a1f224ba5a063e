// Records what results.json reports about the protocol: per-iteration times (slowest worker), the
// node table, and the digest of the final aggregates.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ps/observer.hpp"
#include "ps/workload.hpp"
#include "report/run_report.hpp"

namespace pstwin {

class RunRecorder final : public RunObserver {
 public:
  RunRecorder(const Scenario& scenario, const SyntheticWorkload& workload);

  void node_table(const std::vector<NodeInfo>& table, Seconds at) override;
  void pull_received(int worker, std::uint64_t key, std::uint32_t iteration, const Payload& value) override;
  void iteration_done(int worker, std::uint32_t iteration, Seconds start, Seconds end) override;
  void final_store(NodeId server, std::uint64_t key, const Payload& store) override;
  void lb_decision(NodeId node, const LbDecision& decision) override;
  void lb_report(NodeId from, const LbReport& report) override;
  void late_push(NodeId, int, std::uint64_t, std::uint32_t) override { ++late_pushes_; }

  // Fills iterations, nodes and model_digest.
  void fill(RunReport& report) const;

 private:
  const Scenario& scenario_;
  const SyntheticWorkload& workload_;
  std::vector<NodeInfo> nodes_;
  std::map<std::uint32_t, double> slowest_;            // iteration -> slowest worker's duration
  std::map<std::uint64_t, std::string> final_digest_;  // key -> digest of its final value
  std::optional<BalancingReport> balancing_;           // lb: the scheduler's decisions, servers' rates
  std::uint64_t late_pushes_ = 0;                      // ps.backup_workers
};

// Lower bound on one sync iteration's time on a star topology (see docs/ARCHITECTURE.md, "Bounds"),
// or nothing where no closed form applies. Factors are the network model's own.
std::optional<Bound> analytic_bound(const Scenario& scenario, const SyntheticWorkload& workload,
                                    double bandwidth_factor, double latency_factor, double cross_traffic);

// ps.balancing = "lb": a lower bound over every split of the model between the servers (docs/FPT.md),
// max(max_w ((1+c)M + (1-c)q)/(f B_w), min_k n((1+c)M + k(1-c)q)/(f sum of the k fastest B_j))
// + compute + (4-2c) lf L, q the smallest partition; nothing where no closed form applies.
std::optional<Bound> balanced_bound(const Scenario& scenario, const SyntheticWorkload& workload,
                                    double bandwidth_factor, double latency_factor, double cross_traffic);

}  // namespace pstwin
