// Counts what async servers did with pushes under ps.max_staleness (RunObserver::push_staleness), per
// key partition: applied or refused, and the largest staleness applied, for results.json.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ps/observer.hpp"
#include "report/run_report.hpp"

namespace pstwin {

class StalenessRecorder final : public RunObserver {
 public:
  explicit StalenessRecorder(std::uint64_t bound) { summary_.bound = bound; }
  void push_staleness(NodeId /*server*/, int worker, std::uint64_t /*key*/, std::uint32_t /*iteration*/,
                      std::uint64_t staleness, bool applied) override {
    summary_.max_seen = std::max(summary_.max_seen, staleness);
    if (applied) {
      ++summary_.applied;
      summary_.max_applied = std::max(summary_.max_applied, staleness);
      return;
    }
    const auto rank = static_cast<std::size_t>(worker);
    if (summary_.refused_per_worker.size() <= rank) summary_.refused_per_worker.resize(rank + 1, 0);
    ++summary_.refused;
    ++summary_.refused_per_worker[rank];
  }
  const StalenessSummary& summary() const { return summary_; }

 private:
  StalenessSummary summary_;
};

}  // namespace pstwin
