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

  // At or below it, the MLP's 10 Fashion-MNIST classes are guessed: chance (0.1) and a margin.
  static constexpr double kChanceCeiling = 0.15;

  // The curve, each snapshot evaluated on the test set, and where the run diverged (non-finite
  // parameters, or at chance from some point after iteration 0 to the end); nothing if there were no
  // snapshots.
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
