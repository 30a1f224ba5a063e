// Invariant checks over a whole run, fed by RunObserver reports:
//  - aggregates: every sync aggregate (and every async final store) equals the exact sum of the
//    distinct contributions it should contain;
//  - updates: no push applied twice, none lost;
//  - sync_identical: in sync mode all workers pulled identical values for each key and iteration;
//  - routing (ps.balancing = "lb"): every node holds the same decision for an iteration, and every push
//    and pull reached the server or worker aggregator that decision names (FPT v2.5 sent packets to
//    an aggregator that no longer owned its range);
//  - tags (ZenoPS): every message between servers and validators fills one open (round, worker,
//    tensor) slot exactly once; a second or stray one is refused, never overwrites.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ps/observer.hpp"
#include "ps/workload.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

struct Violation {
  std::string invariant;  // "aggregates", "updates", "sync_identical", "bound", "run"
  std::string detail;
  // When and on which node it was seen (trace.json marks it there), where the backend gave the
  // checker a clock; end-of-run checks have neither.
  std::optional<double> time_s = std::nullopt;
  NodeId node = kNoNode;
};

// Checks made and failed per invariant, so a rate (e.g. crossed aggregates per aggregate) can be reported.
struct InvariantTally {
  std::uint64_t checked = 0;
  std::uint64_t violated = 0;
};
using InvariantTallies = std::map<std::string, InvariantTally>;  // ordered by name: deterministic output
inline void add_tallies(const InvariantTallies& from, InvariantTallies& into) {
  for (const auto& [name, t] : from) {
    into[name].checked += t.checked;
    into[name].violated += t.violated;
  }
}

class InvariantChecker final : public RunObserver {
 public:
  InvariantChecker(const Scenario& scenario, const SyntheticWorkload& workload);

  void push_staleness(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration,
                      std::uint64_t staleness, bool applied) override;
  void push_applied(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) override;
  void duplicate_push(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) override;
  void aggregate_complete(NodeId server, std::uint64_t key, std::uint32_t iteration,
                          const Payload& agg) override;
  void pull_received(int worker, std::uint64_t key, std::uint32_t iteration, const Payload& value) override;
  void final_store(NodeId server, std::uint64_t key, const Payload& store) override;
  void lb_decision(NodeId node, const LbDecision& decision) override;
  void request_routed(NodeId receiver, NodeId sender, std::uint64_t key, std::uint32_t iteration) override;
  void tag_checked(NodeId node, bool ok, const std::string& why) override;
  void worker_lost(int worker, Seconds at) override;
  void late_push(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) override;

  // End-of-run checks (lost updates, workers that never pulled). Call once, after the run.
  void finish(bool run_completed);
  // `node`: where it was seen (kNoNode: nowhere in particular); timed when a clock was given.
  void add(Violation violation, NodeId node = kNoNode);
  // The backend's clock (the simulator's): each violation then says when it was seen.
  void set_clock(std::function<Seconds()> clock) { clock_ = std::move(clock); }
  void count_check(const std::string& invariant);  // one check made outside (e.g. the analytic bound)

  std::uint64_t checked() const { return checked_; }
  const std::vector<Violation>& violations() const { return violations_; }
  std::uint64_t violation_count() const { return violation_count_; }
  const InvariantTallies& tallies() const { return tallies_; }

 private:
  void check_sum(std::string_view what, NodeId server, std::uint64_t key, std::uint32_t iteration,
                 const Payload& value, bool whole_run);

  const Scenario& scenario_;
  const SyntheticWorkload& workload_;
  std::uint64_t checked_ = 0;
  std::uint64_t violation_count_ = 0;
  std::vector<Violation> violations_;  // the first kMaxKept; violation_count_ has them all
  InvariantTallies tallies_;
  // After a worker loss a sum holds what was applied, not every worker's contribution: the expected
  // value of element `element`, over the applied pushes of one round (or of the run, `whole_run`).
  float expected_applied_sum(std::uint64_t key, std::uint32_t iteration, std::size_t element,
                             bool whole_run) const;

  std::set<std::tuple<std::uint64_t, std::uint32_t, int>> applied_;  // (key, iteration, worker)
  std::set<int> lost_;  // ps.on_worker_loss = "continue": workers declared lost
  std::set<std::tuple<std::uint64_t, std::uint32_t, int>>
      late_;  // ps.backup_workers: (key, iteration, worker)
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::pair<int, std::string>> first_pull_digest_;
  std::map<std::uint32_t, LbDecision> decisions_;  // routing: by iteration, as first reported
  std::function<Seconds()> clock_;
};

}  // namespace pstwin
