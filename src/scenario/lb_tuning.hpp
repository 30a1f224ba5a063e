// ps.balancing = "lb" needs no tuning: the partition size, the scheduling credit and fused or separate
// push/pull follow from the cluster's links, as the scheduler knows them (docs/FPT.md "Tuning").
#pragma once

#include <cstdint>
#include <optional>

#include "scenario/scenario.hpp"

namespace pstwin {

struct LbTuning {
  std::uint64_t partition_bytes = 0;
  int scheduling_credit = 0;
  bool fused = false;
};

// What each of the three fields should be for `scenario`'s cluster, roles and model, whatever they are
// set to now; the credit for `partition_bytes` where given (a partition size the scenario fixes).
// Pure: same scenario, same answer (every node of a job derives the same partitions).
LbTuning lb_tuning(const Scenario& scenario, std::optional<std::uint64_t> partition_bytes = {});

}  // namespace pstwin
