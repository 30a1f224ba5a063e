#include "ps/round_plan.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/random.hpp"

namespace pstwin {

namespace {
int count_tensors(const SyntheticWorkload& workload) {
  int tensors = 0;
  for (const auto& partition : workload.partitions()) tensors = std::max(tensors, partition.tensor + 1);
  return tensors;
}
}  // namespace

RoundPlan::RoundPlan(const Scenario& scenario, const SyntheticWorkload& workload)
    : seed_(scenario.seed),
      workers_(scenario.roles.workers),
      tensors_(count_tensors(workload)),
      quota_(std::clamp(static_cast<int>(std::lround(scenario.train.participation * workers_)), 1, workers_)),
      drop_rate_(scenario.train.drop_rate),
      active_(scenario.workload.kind == WorkloadKind::kMlp && scenario.ps.mode == TrainingMode::kSync &&
              (quota_ < workers_ || drop_rate_ > 0)) {}

std::vector<int> RoundPlan::participant_ranks(std::uint32_t round) const {
  std::vector<int> ranks(static_cast<std::size_t>(workers_));
  std::iota(ranks.begin(), ranks.end(), 0);
  if (!active_ || quota_ == workers_) return ranks;
  // The first quota_ places of a seeded Fisher-Yates shuffle.
  RandomStream rng(seed_, "train.participation", round);
  for (int i = 0; i < quota_; ++i) {
    const auto left = static_cast<std::uint64_t>(workers_ - i);
    const auto j = i + static_cast<int>(rng.next_u64() % left);
    std::swap(ranks[static_cast<std::size_t>(i)], ranks[static_cast<std::size_t>(j)]);
  }
  ranks.resize(static_cast<std::size_t>(quota_));
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

bool RoundPlan::participates(int worker, std::uint32_t round) const {
  if (!active_ || quota_ == workers_) return true;
  const auto ranks = participant_ranks(round);
  return std::binary_search(ranks.begin(), ranks.end(), worker);
}

bool RoundPlan::pushes(int worker, std::uint32_t round, int tensor) const {
  if (!active_) return true;
  if (!participates(worker, round)) return false;
  if (drop_rate_ <= 0) return true;
  RandomStream rng(seed_, "train.drop",
                   (static_cast<std::uint64_t>(round) << 32) | static_cast<std::uint32_t>(worker));
  bool kept = true;
  for (int t = 0; t <= tensor && t < tensors_; ++t) kept = rng.uniform01() >= drop_rate_;
  return kept;
}

int RoundPlan::pushers(std::uint32_t round, int tensor) const {
  if (!active_) return workers_;
  int count = 0;
  for (int worker : participant_ranks(round)) count += pushes(worker, round, tensor) ? 1 : 0;
  return count;
}

}  // namespace pstwin
