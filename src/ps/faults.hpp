// The scenario's [faults] as decisions a backend takes where it moves messages and runs tasks
// (docs/FAULTS.md). Pure: every probabilistic decision draws from a RandomStream the caller names
// (the simulator passes the sending node's Runtime::random), every window is read against the time the
// caller passes, so a run replays exactly from its seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/message.hpp"
#include "core/random.hpp"
#include "core/types.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

// One end of a message: the node's name as in results.json ("worker 1") and its host ("h3").
struct FaultEndpoint {
  std::string_view node;
  std::string_view host;
};

// What the backend injected and what the resend layer did about it; results.json's `faults`.
struct FaultCounts {
  std::uint64_t lost = 0;                 // messages dropped by faults.loss
  std::uint64_t duplicated = 0;           // messages delivered a second time by faults.duplicate
  std::uint64_t partitioned = 0;          // messages dropped by a partition
  std::uint64_t clogged = 0;              // messages held by a clog
  double clog_hold_s = 0;                 // their waits, summed
  std::uint64_t slowed = 0;               // executor tasks stretched by faults.slow
  std::uint64_t crashed = 0;              // nodes stopped dead by faults.crashes
  std::uint64_t crash_dropped = 0;        // messages that reached a crashed node
  std::vector<std::string> lost_workers;  // ps.on_worker_loss = "continue": "worker 1 at 10.2 s"
  bool resend_enabled = false;            // ps.resend as resolved
  std::uint64_t resent = 0;               // ps.resend: messages sent again for want of an ack
  std::uint64_t duplicates_dropped = 0;   // ps.resend: copies a receiver had already seen
  std::uint64_t acks = 0;                 // ps.resend: acknowledgements sent
  std::uint64_t given_up = 0;             // ps.resend: unacknowledged at a stop (the peer had stopped)
  // The first message a fault dropped, for the failure it may cause: "push key 3 iteration 2 from
  // worker 1 to server 0 at 0.031 s (faults.loss)".
  std::string first_drop;
};

// Adds one node's counts (what it injected and resent, and its first drop) to a job's total.
void add_fault_counts(FaultCounts& total, const FaultCounts& node);

class FaultPlan {
 public:
  explicit FaultPlan(const Scenario& scenario);
  explicit FaultPlan(const FaultsConfig& faults) : faults_(faults) {}

  enum class Fate { kDeliver, kLose, kDuplicate };
  // faults.loss and faults.duplicate for one message. `random(purpose)` gives the stream to draw from;
  // it is asked only for a probability above 0, so a fault left out never shifts another's draws.
  // A message from a node without an id (registration) is never hit: no resend could recover it.
  Fate fate(const MessageHeader& header, const std::function<RandomStream&(std::string_view)>& random) const;

  // Whether a partition separates the two ends at `now`.
  bool partitioned(Seconds now, FaultEndpoint a, FaultEndpoint b) const;
  // When a message between the two ends that would start at `now` may start: `now`, or the end of the
  // latest clog covering it (clogs that overlap or abut hold it through all of them).
  Seconds clog_release(Seconds now, FaultEndpoint a, FaultEndpoint b) const;
  // How many times longer a task of `node` starting at `now` takes (1: not slowed).
  double slow_factor(Seconds now, std::string_view node) const;

  // Whether a command is data (push, pull, push-pull and their responses) or control.
  static bool is_data(Command command);
  bool any() const { return faults_.any(); }

 private:
  const FaultsConfig& faults_;
};

// "push key 3 iteration 2 from worker 1 to server 0 at 0.031 s", for failure texts.
std::string describe_drop(const MessageHeader& header, std::string_view from, std::string_view to, Seconds at,
                          std::string_view why);

}  // namespace pstwin
