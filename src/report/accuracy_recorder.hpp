// Collects worker 0's model snapshots during a training run (RunObserver::model_snapshot) and turns
// them into the test-accuracy curve afterwards, so evaluation never counts as run time.
#pragma once

#include <cstdint>
#include <vector>

#include "ps/observer.hpp"
#include "ps/training.hpp"
#include "report/run_report.hpp"

namespace pstwin {

class AccuracyRecorder final : public RunObserver {
 public:
  void model_snapshot(int worker, std::uint32_t iterations, Seconds at,
                      std::span<const float> params) override;

  // The curve, each snapshot evaluated on the test set; nothing if there were no snapshots.
  std::optional<AccuracyCurve> evaluate(const TrainingModel& model) const;

 private:
  struct Snapshot {
    std::uint32_t iterations = 0;
    Seconds at = 0;
    std::vector<float> params;
  };
  std::vector<Snapshot> snapshots_;
};

}  // namespace pstwin
