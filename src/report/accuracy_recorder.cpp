#include "report/accuracy_recorder.hpp"

namespace pstwin {

void AccuracyRecorder::model_snapshot(int, std::uint32_t iterations, Seconds at,
                                      std::span<const float> params) {
  snapshots_.push_back({iterations, at, std::vector<float>(params.begin(), params.end())});
}

std::optional<AccuracyCurve> AccuracyRecorder::evaluate(const TrainingModel& model) const {
  if (snapshots_.empty()) return std::nullopt;
  AccuracyCurve result;
  for (const auto& s : snapshots_)
    result.curve.push_back({s.iterations, s.at, model.test_accuracy(s.params)});
  result.final_accuracy = result.curve.back().accuracy;
  return result;
}

}  // namespace pstwin
