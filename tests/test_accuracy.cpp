// The accuracy curve's divergence flag: non-finite parameters, or a collapse to chance that lasts to
// the end, with the iteration where it began; the untrained model at iteration 0 and a slow start
// that recovers are not divergence. Also the labelled curve points through results.json and back.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "report/accuracy_recorder.hpp"

namespace pstwin {
namespace {

// A model whose test accuracy is its first parameter: each snapshot says what it scores.
class FirstParameterIsAccuracy final : public TrainingModel {
 public:
  std::span<const float> initial_parameters() const override { return params_; }
  std::size_t tensor_offset(int) const override { return 0; }
  std::unique_ptr<GradientSource> worker(int) const override { return nullptr; }
  void apply(std::span<float>, std::span<const float>, std::span<float>, std::uint32_t) const override {}
  double test_accuracy(std::span<const float> params) const override { return params[0]; }

 private:
  std::vector<float> params_ = {0.1F, 0.0F};
};

AccuracyCurve curve_of(const std::vector<std::vector<float>>& snapshots) {
  AccuracyRecorder recorder;
  for (std::size_t i = 0; i < snapshots.size(); ++i)
    recorder.model_snapshot(0, static_cast<std::uint32_t>(100 * i), 0.5 * static_cast<double>(i),
                            snapshots[i]);
  const auto curve = recorder.evaluate(FirstParameterIsAccuracy{});
  EXPECT_TRUE(curve.has_value());
  return curve.value_or(AccuracyCurve{});
}

TEST(Accuracy, LearningRunHasNotDiverged) {
  EXPECT_FALSE(curve_of({{0.1F, 0}, {0.6F, 0}, {0.8F, 0}}).diverged);
  // A slow start at chance that recovers.
  EXPECT_FALSE(curve_of({{0.1F, 0}, {0.12F, 0}, {0.7F, 0}}).diverged);
}

TEST(Accuracy, CollapseToChanceNamesTheIterationItBegan) {
  const auto curve = curve_of({{0.1F, 0}, {0.7F, 0}, {0.1F, 0}, {0.3F, 0}, {0.11F, 0}, {0.09F, 0}});
  ASSERT_TRUE(curve.diverged);
  EXPECT_EQ(curve.diverged->iteration, 400u);  // the dip at 200 recovered; from 400 it never did
  EXPECT_NE(curve.diverged->reason.find("chance"), std::string::npos);
  // Never above chance after iteration 0: diverged from the first trained point.
  EXPECT_EQ(curve_of({{0.1F, 0}, {0.1F, 0}, {0.1F, 0}}).diverged->iteration, 100u);
}

TEST(Accuracy, NonFiniteParametersAreDivergence) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto curve = curve_of({{0.1F, 0}, {0.6F, 0}, {0.7F, nan}, {0.1F, nan}});
  ASSERT_TRUE(curve.diverged);
  EXPECT_EQ(curve.diverged->iteration, 200u);
  EXPECT_EQ(curve.diverged->reason, "non-finite parameters");
}

TEST(Accuracy, LabelledPointsRoundTripThroughJson) {
  const auto curve = curve_of({{0.1F, 0}, {0.6F, 0}, {0.1F, 0}});
  const auto j = accuracy_json(curve);
  EXPECT_EQ(j["curve"][1]["iteration"], 100);
  EXPECT_EQ(j["curve"][1]["time_s"], 0.5);
  EXPECT_NEAR(j["curve"][1]["accuracy"].get<double>(), 0.6, 1e-6);
  EXPECT_EQ(j["diverged"], true);
  EXPECT_EQ(j["diverged_iteration"], 200);
  const auto back = accuracy_from_json(nlohmann::json::parse(j.dump()));
  ASSERT_EQ(back.curve.size(), 3u);
  EXPECT_EQ(back.curve[2].iteration, 200u);
  ASSERT_TRUE(back.diverged);
  EXPECT_EQ(back.diverged->reason, curve.diverged->reason);
  EXPECT_EQ(accuracy_json(back).dump(), j.dump());
}

}  // namespace
}  // namespace pstwin
