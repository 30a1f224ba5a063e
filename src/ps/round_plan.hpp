// Who pushes what in a sync round under ZenoPS's participation rate and per-tensor drop rate
// (train.participation, train.drop_rate): a pure function of the scenario seed and the round, so
// workers, servers, validators and the invariant checker agree on it without a message.
//   participation q: each round round(q * workers) workers (at least 1) take part, drawn by a
//     seeded shuffle (stream "train.participation", salt = round); the others only pull the model.
//   drop rate p: a participant skips pushing each tensor with probability p (stream "train.drop",
//     salt = round << 32 | worker, one draw per tensor in order); that tensor counts as a zero update
//     in the round's average over the participants (ZenoPS), and the worker keeps its own unsent
//     step on its replica for one round, then discards it ("error reset", docs/ZENO.md).
#pragma once

#include <cstdint>
#include <vector>

#include "ps/workload.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

class RoundPlan {
 public:
  RoundPlan(const Scenario& scenario, const SyntheticWorkload& workload);

  bool active() const { return active_; }  // off: every worker pushes every tensor every round
  bool participates(int worker, std::uint32_t round) const;
  int participants(std::uint32_t /*round*/) const { return active_ ? quota_ : workers_; }  // same each round
  bool pushes(int worker, std::uint32_t round, int tensor) const;
  int pushers(std::uint32_t round, int tensor) const;  // the pushes a key of `tensor` gets
  int tensors() const { return tensors_; }
  std::vector<int> participant_ranks(std::uint32_t round) const;  // ascending

 private:
  std::uint64_t seed_;
  int workers_;
  int tensors_;
  int quota_;
  double drop_rate_;
  bool active_;
};

}  // namespace pstwin
