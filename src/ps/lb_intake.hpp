// ps.balancing = "lb", on a node that aggregates (a server, or a worker aggregator): every request it
// receives is checked against the decision for the request's iteration, never against a count or the
// latest decision (FPT v2.5 switched by counting pulls and sent packets to a former owner).
//  - a request that arrives before its iteration's decision is held until the decision does;
//  - a request for a key that decision gives to another node fails the run (and the `routing`
//    invariant counts it);
//  - pushes are measured (bytes and arrival times, from other nodes only) and, on a server, the
//    iteration's report goes to the scheduler once every push it was told to expect is in.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/runtime.hpp"
#include "ps/balance.hpp"
#include "ps/observer.hpp"
#include "ps/role_options.hpp"
#include "ps/workload.hpp"

namespace pstwin {

std::string slot_name(int slot, int servers);  // "server 2", "worker aggregator 1"

class RangeIntake {
 public:
  // `book`, `monitor` and `workload` must outlive the intake. `report_on_last_push`: a server's
  // report (a worker reports at the end of its own iteration).
  RangeIntake(Runtime& runtime, RangeIntakeOptions options, RunObserver& observer,
              const SyntheticWorkload& workload, DecisionBook& book, BandwidthMonitor& monitor,
              bool report_on_last_push);

  // The request if it may be served now; nullopt if it is held or was refused (the run failed).
  std::optional<Message> admit(Message message);
  // After `decision` was taken up: the requests held for its iteration that may be served now.
  std::vector<Message> release(const LbDecision& decision);
  std::size_t held() const;

 private:
  bool accept(const Message& message, const LbDecision& decision);

  Runtime& rt_;
  const RangeIntakeOptions options_;
  RunObserver& observer_;
  const SyntheticWorkload& workload_;
  DecisionBook& book_;
  BandwidthMonitor& monitor_;
  bool report_on_last_push_;
  std::map<std::uint32_t, std::vector<Message>> held_;    // requests that overtook their decision
  std::map<std::uint32_t, std::uint64_t> pushes_routed_;  // per iteration, to know when to report
};

}  // namespace pstwin
