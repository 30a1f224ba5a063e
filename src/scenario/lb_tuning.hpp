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
  // The simulator's transport, as the real vans have it: a send pool slot per connection (every
  // connection may have a message in transmission; the pool paces the light ones), pstwin's flow
  // model where SimGrid's network model is not required (SimGrid's transfers take no rate bound, so
  // neither pacing nor receive shaping applies there), and messages pipelined on their connection.
  int send_pool_slots = 0;
  std::string network_model;
  bool pipeline_messages = false;
};

// What each of the three fields should be for `scenario`'s cluster, roles and model, whatever they are
// set to now; the credit for `partition_bytes` where given (a partition size the scenario fixes).
// Pure: same scenario, same answer (every node of a job derives the same partitions).
LbTuning lb_tuning(const Scenario& scenario, std::optional<std::uint64_t> partition_bytes = {});

}  // namespace pstwin
