#include "report/accuracy_recorder.hpp"

#include <algorithm>
#include <cmath>

namespace pstwin {

void AccuracyRecorder::model_snapshot(int, std::uint32_t iterations, Seconds at,
                                      std::span<const float> params) {
  snapshots_.push_back({iterations, at, std::vector<float>(params.begin(), params.end())});
}

std::optional<AccuracyCurve> AccuracyRecorder::evaluate(const TrainingModel& model) const {
  if (snapshots_.empty()) return std::nullopt;
  AccuracyCurve result;
  std::optional<std::size_t> first_non_finite;
  for (const auto& s : snapshots_) {
    if (!first_non_finite && !std::ranges::all_of(s.params, [](float v) { return std::isfinite(v); }))
      first_non_finite = result.curve.size();
    result.curve.push_back({s.iterations, s.at, model.test_accuracy(s.params)});
  }
  result.final_accuracy = result.curve.back().accuracy;
  // Non-finite parameters never come back. At chance, a run diverged where it stayed there to the end:
  // the untrained model at iteration 0 is at chance too, and a slow start may still recover.
  std::optional<std::size_t> collapsed;
  for (std::size_t i = result.curve.size(); i-- > 0 && result.curve[i].accuracy <= kChanceCeiling;)
    if (result.curve[i].iteration > 0) collapsed = i;
  if (first_non_finite && (!collapsed || *first_non_finite <= *collapsed))
    result.diverged = Divergence{result.curve[*first_non_finite].iteration, "non-finite parameters"};
  else if (collapsed)
    result.diverged =
        Divergence{result.curve[*collapsed].iteration, "accuracy collapsed to chance (<= 0.15)"};
  return result;
}

}  // namespace pstwin
