// What a run of a scenario needs, estimated from its fields before anything is built, so that a
// scenario that cannot fit is refused by `pstwin check` (and sim, explore, run, node, which validate
// the same way) naming the field, instead of growing without output or dying in an allocator.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "scenario/scenario.hpp"

namespace pstwin {

// One part of the estimate and the field that drives it.
struct ResourceTerm {
  std::string field;   // dotted path, e.g. "roles.workers"
  double amount = 0;   // bytes or messages
  std::string detail;  // how it was counted, e.g. "10000003 nodes x 4 actors x 64 KiB"
};

// Doubles, not integers: a hostile scenario's product (1e15-byte model x 1e7 workers) must not wrap.
struct ResourceEstimate {
  std::vector<ResourceTerm> memory;  // resident bytes of a simulated run, largest term first
  double memory_bytes = 0;           // their sum
  double messages = 0;               // simulated messages of the whole run
  ResourceTerm messages_term;        // the field that drives the message count most
};

struct ResourceLimits {
  double memory_bytes = 0;  // 0: this machine's memory (machine_memory_bytes)
  // About an hour of simulation at the simulator's pace of a few 100 000 messages per second.
  double messages = 1e9;
  // Stacks are address space, not memory (untouched pages), but SimGrid maps each whole.
  int max_stack_size_kb = 1 << 20;
};

ResourceEstimate estimate_resources(const Scenario& scenario);

// Physical memory, or the cgroup's limit where that is lower.
double machine_memory_bytes();

// The field at fault and what is wrong, or nothing when the run fits.
struct ResourceProblem {
  std::string field;
  std::string problem;
};
std::optional<ResourceProblem> check_resources(const Scenario& scenario, const ResourceLimits& limits = {});

// "1.5 GB", "23 TB": the magnitude of an estimate, for messages.
std::string approximate_bytes(double bytes);

}  // namespace pstwin
