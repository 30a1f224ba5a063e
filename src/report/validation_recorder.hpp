// Counts the ZenoPS validators' decisions per worker (RunObserver::candidate_judged) for results.json.
#pragma once

#include <cstdint>

#include "ps/observer.hpp"
#include "report/run_report.hpp"

namespace pstwin {

class ValidationRecorder final : public RunObserver {
 public:
  void candidate_judged(int /*validator*/, int worker, std::uint32_t /*iteration*/, bool accepted) override {
    const auto rank = static_cast<std::size_t>(worker);
    if (summary_.per_worker.size() <= rank) summary_.per_worker.resize(rank + 1);
    ++summary_.judged;
    ++summary_.per_worker[rank].first;
    if (!accepted) return;
    ++summary_.accepted;
    ++summary_.per_worker[rank].second;
  }
  const ValidationSummary& summary() const { return summary_; }

 private:
  ValidationSummary summary_;
};

}  // namespace pstwin
