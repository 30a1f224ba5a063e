// Counts a robust rule's judgements on the servers (RunObserver::rule_judged) for results.json's
// `selection`.
#pragma once

#include <cstdint>
#include <string>

#include "ps/observer.hpp"
#include "report/run_report.hpp"

namespace pstwin {

class SelectionRecorder final : public RunObserver {
 public:
  explicit SelectionRecorder(std::string rule) { summary_.rule = std::move(rule); }
  void rule_judged(NodeId /*server*/, std::uint64_t /*key*/, std::uint32_t /*iteration*/,
                   const CandidateJudgement& judgement) override {
    const auto rank = static_cast<std::size_t>(judgement.worker);
    if (summary_.per_worker.size() <= rank) summary_.per_worker.resize(rank + 1);
    auto& worker = summary_.per_worker[rank];
    ++summary_.judged;
    ++worker.judged;
    worker.share_sum += judgement.share;
    ++summary_.verdicts[std::string(judgement.verdict)];
    if (!judgement.accepted) return;
    ++summary_.accepted;
    ++worker.accepted;
  }
  // Whether anything was judged (a run with the plain mean judges nothing).
  bool judged_any() const { return summary_.judged > 0; }
  const SelectionSummary& summary() const { return summary_; }

 private:
  SelectionSummary summary_;
};

}  // namespace pstwin
