// Robust aggregation rules and Byzantine attacks (src/zeno): each rule on crafted inputs whose right answer
// is known, each attack's output and statistics, seeded determinism, and Zeno on the real MLP and
// Fashion-MNIST.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/random.hpp"
#include "train/idx_dataset.hpp"
#include "train/mlp.hpp"
#include "train/shard_trainer.hpp"
#include "zeno/attacks.hpp"
#include "zeno/mlp_loss.hpp"
#include "zeno/rules.hpp"
#include "zeno/vector_math.hpp"

namespace pstwin::zeno {
namespace {

using Vec = std::vector<float>;

std::vector<std::span<const float>> spans(const std::vector<Vec>& vectors) {
  return {vectors.begin(), vectors.end()};
}

Vec random_vector(std::size_t size, std::uint64_t salt, double mean = 0.0, double stddev = 1.0) {
  RandomStream rng(7, "test.zeno.vector", salt);
  Vec v(size);
  for (float& x : v) x = static_cast<float>(rng.normal(mean, stddev));
  return v;
}

Vec scaled(const Vec& v, double factor) {
  Vec out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(factor * v[i]);
  return out;
}

Vec plus(const Vec& a, const Vec& b) {
  Vec out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

// Exact mean in double, for comparing against a rule's average of the same candidates.
Vec mean_of(const std::vector<Vec>& vectors) {
  Vec out(vectors[0].size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    double sum = 0;
    for (const Vec& v : vectors) sum += v[i];
    out[i] = static_cast<float>(sum / static_cast<double>(vectors.size()));
  }
  return out;
}

double norm(std::span<const float> v) {
  return std::sqrt(squared_norm(v));
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

bool same_bytes(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---------------------------------------------------------------- names and kernels

TEST(ZenoNames, EveryRuleAndAttackParsesBackAndUnknownNamesListTheChoices) {
  for (const RuleInfo& info : rule_infos()) EXPECT_EQ(parse_rule(info.name), info.kind) << info.name;
  for (const AttackInfo& info : attack_infos()) EXPECT_EQ(parse_attack(info.name), info.kind) << info.name;
  EXPECT_EQ(rule_infos().size(), 10u);
  EXPECT_EQ(attack_infos().size(), 9u);

  const std::string rule_error = error_of([] { parse_rule("krumm"); });
  EXPECT_NE(rule_error.find("'krumm'"), std::string::npos) << rule_error;
  EXPECT_NE(rule_error.find("multi-krum"), std::string::npos) << rule_error;
  EXPECT_NE(rule_error.find("zeno++"), std::string::npos) << rule_error;
  const std::string attack_error = error_of([] { parse_attack("signflip"); });
  EXPECT_NE(attack_error.find("'signflip'"), std::string::npos) << attack_error;
  EXPECT_NE(attack_error.find("sign-flip"), std::string::npos) << attack_error;
  EXPECT_EQ(parse_scaling("clip"), ZenoPlusPlusScaling::kClip);
  EXPECT_NE(error_of([] { parse_scaling("shrink"); }).find("rescale, clip, none"), std::string::npos);
}

TEST(ZenoVectorMath, ReductionsMatchExactSumsIncludingTheTail) {
  Vec u(19), v(19);  // 19: two full blocks of 8 lanes and a tail of 3
  double uv = 0, uu = 0, vv = 0, dd = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    u[i] = static_cast<float>(i) + 0.5f;
    v[i] = 2.0f - static_cast<float>(i);
    uv += double(u[i]) * v[i];
    uu += double(u[i]) * u[i];
    vv += double(v[i]) * v[i];
    dd += (double(u[i]) - v[i]) * (double(u[i]) - v[i]);
  }
  const Moments m = moments(u, v);
  EXPECT_EQ(m.uv, uv);  // small integers and halves: every partial sum is exact
  EXPECT_EQ(m.uu, uu);
  EXPECT_EQ(m.vv, vv);
  EXPECT_EQ(dot(u, v), uv);
  EXPECT_EQ(squared_norm(u), uu);
  EXPECT_EQ(squared_distance(u, v), dd);
  EXPECT_THROW(dot(u, std::span<const float>(v).first(18)), std::invalid_argument);
}

// ---------------------------------------------------------------- ZenoPS validator

TEST(ZenoPs, SignFlippedAndOversizedUpdatesAreRejectedHonestOnesAveraged) {
  const Vec v = random_vector(1000, 1);
  const std::vector<Vec> candidates = {
      plus(v, scaled(random_vector(1000, 2), 0.3)),  // honest: close to v
      plus(scaled(v, 0.8), scaled(random_vector(1000, 3), 0.3)),
      scaled(v, -4.0),  // sign-flipped x4
      scaled(v, 1.5),   // right direction, ||u||^2 = 2.25 ||v||^2 >= 1.6 ||v||^2
      Vec(1000, 0.0f),  // <u,v> = 0: not > rho ||v||^2 with rho = 0
  };
  const Aggregate result = zenops(spans(candidates), v, {}, ZenoPsConfig{.rho = 0.0, .per_tensor = false});
  ASSERT_EQ(result.decisions.size(), 5u);
  EXPECT_TRUE(result.decisions[0].accepted);
  EXPECT_TRUE(result.decisions[1].accepted);
  EXPECT_EQ(result.decisions[2].verdict, Verdict::kInnerProduct);
  EXPECT_LT(result.decisions[2].score, 0);  // <u,v>/||v||^2 = -4
  EXPECT_NEAR(result.decisions[2].score, -4.0, 1e-6);
  EXPECT_EQ(result.decisions[3].verdict, Verdict::kNorm);
  EXPECT_EQ(result.decisions[4].verdict, Verdict::kInnerProduct);
  EXPECT_EQ(result.accepted(), 2u);
  EXPECT_DOUBLE_EQ(result.decisions[0].weight, 0.5);
  EXPECT_EQ(result.decisions[2].weight, 0.0);
  const Vec expected = mean_of({candidates[0], candidates[1]});
  for (std::size_t i = 0; i < expected.size(); ++i) ASSERT_FLOAT_EQ(result.value[i], expected[i]) << i;
  EXPECT_TRUE(result.tensor_decisions.empty());

  // rho > 0 raises the bar: at rho = 0.85 only the first (<u,v> ~ ||v||^2) passes.
  const Aggregate strict = zenops(spans(candidates), v, {}, ZenoPsConfig{.rho = 0.85, .per_tensor = false});
  EXPECT_TRUE(strict.decisions[0].accepted);
  EXPECT_EQ(strict.decisions[1].verdict, Verdict::kInnerProduct);
}

TEST(ZenoPs, NoneAcceptedGivesZeroAndNonFiniteIsRejected) {
  const Vec v = random_vector(64, 4);
  Vec poisoned = v;
  poisoned[5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Vec> candidates = {scaled(v, -1.0), poisoned};
  const Aggregate result = zenops(spans(candidates), v, {}, ZenoPsConfig{.per_tensor = false});
  EXPECT_EQ(result.accepted(), 0u);
  EXPECT_EQ(result.decisions[1].verdict, Verdict::kNonFinite);
  for (const float x : result.value) ASSERT_EQ(x, 0.0f);
}

TEST(ZenoPs, PerTensorScoringDropsOnlyTheBadTensor) {
  // Two tensors: [0, 30) and [30, 100). Candidate 1 is honest on tensor 0 and sign-flipped on tensor 1.
  const std::vector<TensorSlice> layout = {{0, 30}, {30, 70}};
  const Vec v = random_vector(100, 5);
  Vec mixed = v;
  for (std::size_t i = 30; i < 100; ++i) mixed[i] = -v[i];
  const std::vector<Vec> candidates = {scaled(v, 0.5), mixed};
  const Aggregate result = zenops(spans(candidates), v, layout, ZenoPsConfig{});
  ASSERT_EQ(result.tensors, 2u);
  ASSERT_EQ(result.tensor_decisions.size(), 4u);
  EXPECT_TRUE(result.tensor_decisions[0].accepted);   // candidate 0, tensor 0
  EXPECT_TRUE(result.tensor_decisions[1].accepted);   // candidate 0, tensor 1
  EXPECT_TRUE(result.tensor_decisions[2].accepted);   // candidate 1, tensor 0
  EXPECT_FALSE(result.tensor_decisions[3].accepted);  // candidate 1, tensor 1
  EXPECT_EQ(result.tensor_decisions[3].verdict, Verdict::kInnerProduct);
  EXPECT_TRUE(result.decisions[0].accepted);
  EXPECT_FALSE(result.decisions[1].accepted);
  EXPECT_EQ(result.decisions[1].verdict, Verdict::kInnerProduct);
  EXPECT_NEAR(result.decisions[1].weight, 0.5 * 30 / 100, 1e-12);  // half weight on 30 of 100 elements
  for (std::size_t i = 0; i < 30; ++i) ASSERT_FLOAT_EQ(result.value[i], 0.5f * (0.5f * v[i] + v[i])) << i;
  for (std::size_t i = 30; i < 100; ++i) ASSERT_FLOAT_EQ(result.value[i], 0.5f * v[i]) << i;

  // Scored as one model the flipped part outweighs the honest part, so candidate 1 goes entirely.
  const Aggregate whole = zenops(spans(candidates), v, layout, ZenoPsConfig{.per_tensor = false});
  EXPECT_FALSE(whole.decisions[1].accepted);
  for (std::size_t i = 0; i < 100; ++i) ASSERT_FLOAT_EQ(whole.value[i], 0.5f * v[i]) << i;

  const std::vector<TensorSlice> gap = {{0, 30}, {40, 60}};
  const std::string error = error_of([&] { zenops(spans(candidates), v, gap, ZenoPsConfig{}); });
  EXPECT_NE(error.find("tensor 1 starts at element 40"), std::string::npos) << error;
  EXPECT_NE(error_of([&] { zenops(spans(candidates), Vec(99), {}, ZenoPsConfig{}); }).find("reference"),
            std::string::npos);
}

// ---------------------------------------------------------------- Zeno (sync)

// f(x) = 1/2 ||x - target||^2: the gradient at x is x - target, and a step -gamma u with u = x - target
// lowers the loss by (gamma - gamma^2 / 2) ||u||^2.
struct Quadratic {
  Vec target;
  double operator()(std::span<const float> x) const {
    double sum = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      sum += 0.5 * (double(x[i]) - target[i]) * (double(x[i]) - target[i]);
    return sum;
  }
};

TEST(Zeno, DropsTheLowestScoresOnAQuadraticLoss) {
  const Quadratic loss{Vec(50, 0.0f)};
  const Vec x = random_vector(50, 6, 1.0);
  const Vec gradient = x;  // x - target
  const std::vector<Vec> candidates = {
      plus(gradient, scaled(random_vector(50, 7), 0.05)),
      scaled(gradient, -4.0),  // sign-flip: raises the loss
      plus(gradient, scaled(random_vector(50, 8), 0.05)),
      scaled(random_vector(50, 9), 3.0),  // noise: no descent, big norm
      plus(gradient, scaled(random_vector(50, 10), 0.05)),
  };
  const ZenoConfig config{.gamma = 0.1, .rho = 0.001, .drop = 2};
  const Aggregate result = zeno(spans(candidates), x, std::cref(loss), config);
  EXPECT_EQ(result.accepted(), 3u);
  EXPECT_EQ(result.decisions[1].verdict, Verdict::kDropped);
  EXPECT_EQ(result.decisions[3].verdict, Verdict::kDropped);
  for (const std::size_t c : {0u, 2u, 4u}) {
    EXPECT_TRUE(result.decisions[c].accepted) << c;
    EXPECT_DOUBLE_EQ(result.decisions[c].weight, 1.0 / 3);
  }
  // The score is f(x) - f(x - gamma u) - rho ||u||^2, exactly as computed here.
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    Vec trial(50);
    for (std::size_t i = 0; i < 50; ++i) trial[i] = static_cast<float>(x[i] - 0.1 * candidates[c][i]);
    const double expected = loss(x) - loss(trial) - 0.001 * squared_norm(candidates[c]);
    EXPECT_NEAR(result.decisions[c].score, expected, 1e-9 * std::abs(expected) + 1e-12) << c;
  }
  EXPECT_LT(result.decisions[1].score, 0);
  const Vec expected = mean_of({candidates[0], candidates[2], candidates[4]});
  for (std::size_t i = 0; i < 50; ++i) ASSERT_NEAR(result.value[i], expected[i], 1e-6) << i;
}

TEST(Zeno, EqualScoresKeepTheLowerWorkerIndexAndNonFiniteGoesFirst) {
  const Quadratic loss{Vec(8, 0.0f)};
  const Vec x(8, 1.0f);
  Vec bad = x;
  bad[0] = std::numeric_limits<float>::infinity();
  const std::vector<Vec> candidates = {x, x, bad, x};
  const Aggregate one = zeno(spans(candidates), x, std::cref(loss), ZenoConfig{.drop = 1});
  EXPECT_EQ(one.decisions[2].verdict, Verdict::kNonFinite);
  EXPECT_EQ(one.accepted(), 3u);
  const Aggregate two = zeno(spans(candidates), x, std::cref(loss), ZenoConfig{.drop = 2});
  EXPECT_TRUE(two.decisions[0].accepted);
  EXPECT_TRUE(two.decisions[1].accepted);
  EXPECT_FALSE(two.decisions[3].accepted);  // ties: the highest index goes
  EXPECT_EQ(two.decisions[3].verdict, Verdict::kDropped);

  const std::string error =
      error_of([&] { zeno(spans(candidates), x, std::cref(loss), ZenoConfig{.drop = 4}); });
  EXPECT_NE(error.find("zeno.drop = 4"), std::string::npos) << error;
  EXPECT_NE(error_of([&] { zeno(spans(candidates), x, LossFn{}, ZenoConfig{}); }).find("RuleInputs::loss"),
            std::string::npos);
}

// rho's sign decides which norm wins when the loss cannot tell candidates apart (ALIE's copies are
// shorter than honest updates, ROBUSTNESS.md): rho > 0 keeps the short ones, rho < 0 the long ones.
TEST(Zeno, RhoSignDecidesBetweenShortAndLongUpdatesOfEqualLoss) {
  const auto flat = [](std::span<const float>) { return 1.0; };  // f_r the same everywhere
  const Vec x(4, 0.0f);
  const std::vector<Vec> candidates = {Vec(4, 2.0f), Vec(4, 0.5f), Vec(4, 3.0f), Vec(4, 1.0f)};
  const Aggregate shorter =
      zeno(spans(candidates), x, flat, ZenoConfig{.gamma = 0.1, .rho = 0.01, .drop = 2});
  const Aggregate longer =
      zeno(spans(candidates), x, flat, ZenoConfig{.gamma = 0.1, .rho = -0.01, .drop = 2});
  for (const std::size_t c : {1u, 3u}) {
    EXPECT_TRUE(shorter.decisions[c].accepted) << c;
    EXPECT_FALSE(longer.decisions[c].accepted) << c;
  }
  for (const std::size_t c : {0u, 2u}) {
    EXPECT_FALSE(shorter.decisions[c].accepted) << c;
    EXPECT_TRUE(longer.decisions[c].accepted) << c;
  }
  EXPECT_DOUBLE_EQ(longer.decisions[2].score, 0.01 * 36.0);  // -rho ||u||^2 with ||u||^2 = 4 x 9
  const std::string error = error_of(
      [&] { zeno(spans(candidates), x, flat, ZenoConfig{.rho = std::numeric_limits<double>::quiet_NaN()}); });
  EXPECT_NE(error.find("zeno.rho"), std::string::npos) << error;
}

// On the real model: a validator batch of Fashion-MNIST scores the honest gradient above its sign flip
// and above a gradient of flipped labels.
TEST(Zeno, RealMlpScoresHonestAboveSignFlipAndLabelFlip) {
  const train::ImageDataset& data = train::shared_fashion_mnist(train::Split::kTrain);
  const train::Mlp model({784, 32, 10});
  Vec params(model.parameter_count());
  RandomStream init(3, "test.zeno.init");
  model.initialize(params, init);

  std::vector<std::uint32_t> shard(2000);
  std::iota(shard.begin(), shard.end(), 0u);
  train::ShardTrainer honest_worker(model, data, shard, 256, RandomStream(3, "test.zeno.batches"));
  train::ShardTrainer flipped_worker(model, data, shard, 256, RandomStream(3, "test.zeno.batches"));
  const std::vector<std::uint8_t> map = label_flip_map(10);
  flipped_worker.set_label_map(map);
  Vec honest(model.parameter_count()), flipped(model.parameter_count());
  honest_worker.step(params, honest);
  flipped_worker.step(params, flipped);

  std::vector<std::uint32_t> validation(256);
  std::iota(validation.begin(), validation.end(), 50000u);
  MlpBatchLoss loss(model, data, validation);
  const std::vector<Vec> candidates = {honest, sign_flip(honest, {.scale = 4}), flipped};
  const Aggregate result =
      zeno(spans(candidates), params, std::ref(loss), ZenoConfig{.gamma = 0.1, .drop = 2});
  EXPECT_TRUE(result.decisions[0].accepted);
  EXPECT_GT(result.decisions[0].score, 0);  // a real descent step on held-out data
  EXPECT_GT(result.decisions[0].score, result.decisions[1].score);
  EXPECT_GT(result.decisions[0].score, result.decisions[2].score);
}

// ---------------------------------------------------------------- Zeno++ (async)

TEST(ZenoPlusPlus, AcceptsJustAboveTheThresholdAndRejectsJustBelow) {
  // v = e0, g at angle theta: after rescaling ||g|| = 1, so the test is gamma cos - rho >= -gamma eps,
  // i.e. cos >= (rho - gamma eps) / gamma = 0.1 with gamma 0.5, rho 0.1, eps 0.1.
  const ZenoPlusPlusConfig config{.gamma = 0.5, .rho = 0.1, .epsilon = 0.1};
  Vec v(2, 0.0f);
  v[0] = 1.0f;
  const auto at_cosine = [](double cosine, double length) {
    return Vec{static_cast<float>(length * cosine),
               static_cast<float>(length * std::sqrt(1 - cosine * cosine))};
  };
  const std::vector<Vec> above = {at_cosine(0.101, 7.0)};
  const std::vector<Vec> below = {at_cosine(0.099, 7.0)};
  const Aggregate yes = zeno_plus_plus(spans(above), v, config);
  const Aggregate no = zeno_plus_plus(spans(below), v, config);
  EXPECT_TRUE(yes.decisions[0].accepted);
  EXPECT_NEAR(yes.decisions[0].score, 0.5 * 0.001, 1e-6);
  EXPECT_FALSE(no.decisions[0].accepted);
  EXPECT_EQ(no.decisions[0].verdict, Verdict::kDropped);
  EXPECT_NEAR(no.decisions[0].score, -0.5 * 0.001, 1e-6);
  EXPECT_NEAR(norm(yes.value), 1.0, 1e-6);  // rescaled to ||v|| before it is applied
  for (const float x : no.value) EXPECT_EQ(x, 0.0f);
}

TEST(ZenoPlusPlus, SyncRoundAveragesTheAcceptedStepsOnly) {
  // Two honest updates and one sign-flipped: the flipped one is dropped and must not shrink the step
  // (an average over all three would give 2/3 of it).
  const Vec v = {1.0f, 0.0f};
  const std::vector<Vec> honest = {{2.0f, 0.0f}, {4.0f, 0.0f}, {-8.0f, 0.0f}};
  const Aggregate result = zeno_plus_plus(spans(honest), v, {.rho = 0.001, .epsilon = 0.0});
  EXPECT_TRUE(result.decisions[0].accepted);
  EXPECT_TRUE(result.decisions[1].accepted);
  EXPECT_FALSE(result.decisions[2].accepted);
  EXPECT_FLOAT_EQ(result.value[0], 1.0f);  // both rescaled to ||v|| = 1, averaged over the two
  EXPECT_DOUBLE_EQ(result.decisions[0].weight, 0.5 * 0.5);
  EXPECT_DOUBLE_EQ(result.decisions[2].weight, 0.0);
  // All rejected: no step at all.
  const Aggregate none = zeno_plus_plus(spans({{-8.0f, 0.0f}}), v, {});
  EXPECT_EQ(none.value[0], 0.0f);
}

TEST(ZenoPlusPlus, ClipNeverEnlargesAndReversedRejectionIsOptIn) {
  Vec v = {3.0f, 4.0f};  // ||v|| = 5
  const std::vector<Vec> small = {{0.3f, 0.4f}};
  const Aggregate clipped = zeno_plus_plus(spans(small), v, {.scaling = ZenoPlusPlusScaling::kClip});
  EXPECT_FLOAT_EQ(clipped.value[0], 0.3f);
  const Aggregate rescaled = zeno_plus_plus(spans(small), v, {.scaling = ZenoPlusPlusScaling::kRescale});
  EXPECT_FLOAT_EQ(rescaled.value[0], 3.0f);

  const std::vector<Vec> flipped = {{-6.0f, -8.0f}};  // cos = -1, ||g|| = 10
  const Aggregate dropped = zeno_plus_plus(spans(flipped), v, {});
  EXPECT_EQ(dropped.decisions[0].verdict, Verdict::kDropped);
  EXPECT_EQ(dropped.value[0], 0.0f);
  const Aggregate reversed =
      zeno_plus_plus(spans(flipped), v, {.reverse_rejected = true, .reverse_scale = 0.4});
  EXPECT_EQ(reversed.decisions[0].verdict, Verdict::kReversed);
  EXPECT_FALSE(reversed.decisions[0].accepted);
  // -0.4 * |cos| * (g rescaled to ||v||) = -0.4 * (-3, -4)
  EXPECT_FLOAT_EQ(reversed.value[0], 1.2f);
  EXPECT_FLOAT_EQ(reversed.value[1], 1.6f);
}

TEST(ZenoPlusPlus, ClipFactorBoundsLongUpdatesAndLeavesShorterOnesAlone) {
  const Vec v = {3.0f, 4.0f};  // ||v|| = 5
  const ZenoPlusPlusConfig twice{.epsilon = 1e3, .scaling = ZenoPlusPlusScaling::kClip, .clip_factor = 2.0};
  // ||g|| = 50: shortened to 2 ||v|| = 10.
  const Aggregate long_one = zeno_plus_plus(spans({{30.0f, 40.0f}}), v, twice);
  ASSERT_TRUE(long_one.decisions[0].accepted);
  EXPECT_FLOAT_EQ(long_one.value[0], 6.0f);
  EXPECT_FLOAT_EQ(long_one.value[1], 8.0f);
  EXPECT_DOUBLE_EQ(long_one.decisions[0].weight, 0.2);
  // ||g|| = 7.5 is under 2 ||v||: applied as sent (factor 1 would have cut it to 5).
  const Aggregate under = zeno_plus_plus(spans({{4.5f, 6.0f}}), v, twice);
  EXPECT_FLOAT_EQ(under.value[0], 4.5f);
  const Aggregate at_one =
      zeno_plus_plus(spans({{4.5f, 6.0f}}), v, {.epsilon = 1e3, .scaling = ZenoPlusPlusScaling::kClip});
  EXPECT_FLOAT_EQ(at_one.value[0], 3.0f);
  // The test is scored on the clipped g: a long flipped update fails it at the clipped length.
  const ZenoPlusPlusConfig strict{
      .rho = 0.001, .epsilon = 0.0, .scaling = ZenoPlusPlusScaling::kClip, .clip_factor = 2.0};
  EXPECT_FALSE(zeno_plus_plus(spans({{-30.0f, -40.0f}}), v, strict).decisions[0].accepted);
  RuleConfig bad_factor{.kind = RuleKind::kZenoPlusPlus};
  bad_factor.zenopp.clip_factor = 0;
  const std::string error = error_of([&] { validate(bad_factor); });
  EXPECT_NE(error.find("zenopp.clip_factor = 0"), std::string::npos) << error;
}

TEST(ValidationOnly, AppliesTheReferenceAloneAndDropsEveryCandidate) {
  const Vec v = {1.0f, -2.0f, 0.5f};
  const std::vector<Vec> candidates = {
      {2.0f, -4.0f, 1.0f}, {-1.0f, 2.0f, -0.5f}, {std::numeric_limits<float>::infinity(), 0.0f, 0.0f}};
  const Aggregate result = aggregate({.kind = RuleKind::kValidationOnly},
                                     RuleInputs{.candidates = spans(candidates), .reference = v});
  EXPECT_EQ(result.value, v);
  EXPECT_EQ(result.accepted(), 0u);
  EXPECT_EQ(result.decisions[0].verdict, Verdict::kDropped);
  EXPECT_DOUBLE_EQ(result.decisions[0].score, 2.0);  // <u,v> / ||v||^2
  EXPECT_DOUBLE_EQ(result.decisions[1].score, -1.0);
  EXPECT_EQ(result.decisions[2].verdict, Verdict::kNonFinite);
  for (const Decision& d : result.decisions) EXPECT_EQ(d.weight, 0.0);
  // It needs v; without one the error says so.
  EXPECT_NE(error_of([&] { validation_only(spans(candidates), {}); }).find("reference"), std::string::npos);
}

// ---------------------------------------------------------------- baselines

// Five honest workers near `honest`, three colluding attackers at one far point.
struct PlantedCluster {
  Vec honest = random_vector(40, 11);
  std::vector<Vec> candidates;
  PlantedCluster() {
    const Vec attacker = scaled(honest, -10.0);
    for (std::uint64_t w = 0; w < 8; ++w) {
      candidates.push_back(w == 1 || w == 4 || w == 6 ? attacker
                                                      : plus(honest, scaled(random_vector(40, 20 + w), 0.1)));
    }
  }
  static bool is_attacker(std::size_t w) { return w == 1 || w == 4 || w == 6; }
};

TEST(ZenoKrum, ChoosesThePlantedHonestCluster) {
  const PlantedCluster planted;
  const Aggregate one = krum(spans(planted.candidates), KrumConfig{.byzantine = 2}, false);
  ASSERT_EQ(one.accepted(), 1u);
  for (std::size_t w = 0; w < 8; ++w) {
    if (one.decisions[w].accepted) {
      EXPECT_FALSE(PlantedCluster::is_attacker(w)) << w;
      EXPECT_TRUE(same_bytes(one.value, planted.candidates[w]));
    }
  }
  const Aggregate multi = krum(spans(planted.candidates), KrumConfig{.byzantine = 2, .select = 5}, true);
  ASSERT_EQ(multi.accepted(), 5u);
  std::vector<Vec> honest;
  for (std::size_t w = 0; w < 8; ++w) {
    EXPECT_EQ(multi.decisions[w].accepted, !PlantedCluster::is_attacker(w)) << w;
    if (!PlantedCluster::is_attacker(w)) honest.push_back(planted.candidates[w]);
  }
  const Vec expected = mean_of(honest);
  for (std::size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(multi.value[i], expected[i], 1e-6) << i;

  const std::string error =
      error_of([&] { krum(spans(planted.candidates), KrumConfig{.byzantine = 3}, false); });
  EXPECT_NE(error.find("krum.byzantine = 3 needs at least 2f + 3 = 9 candidates, got 8"), std::string::npos)
      << error;
  EXPECT_NE(error_of([&] {
              krum(spans(planted.candidates), KrumConfig{.byzantine = 2, .select = 7}, true);
            }).find("krum.select = 7"),
            std::string::npos);
}

TEST(ZenoMedianAndTrimmedMean, IgnorePlantedOutliers) {
  // Coordinate i: honest values i + {-2, -1, 0, 1, 2} in shuffled worker order, two outliers at +-1e6.
  const std::size_t d = 16;
  std::vector<Vec> candidates(7, Vec(d));
  const int offsets[5] = {1, -2, 0, 2, -1};
  for (std::size_t i = 0; i < d; ++i) {
    for (std::size_t w = 0; w < 5; ++w) candidates[w][i] = static_cast<float>(i) + offsets[(w + i) % 5];
    candidates[5][i] = 1e6f;
    candidates[6][i] = (i % 2 == 0) ? 1e6f : -1e6f;
  }
  const Aggregate median = coordinate_median(spans(candidates));
  const Aggregate trimmed = trimmed_mean(spans(candidates), TrimmedMeanConfig{.trim = 2});
  const Aggregate plain = mean(spans(candidates));
  for (std::size_t i = 0; i < d; ++i) {
    // Median of 7: the 4th smallest. Even i: honest values and two +1e6 -> i + 1. Odd i: -> i.
    EXPECT_FLOAT_EQ(median.value[i], static_cast<float>(i) + (i % 2 == 0 ? 1.0f : 0.0f)) << i;
    // Trimmed (2 each side): even i keeps i + {0, 1, 2}; odd i keeps i + {-1, 0, 1}.
    EXPECT_FLOAT_EQ(trimmed.value[i], static_cast<float>(i) + (i % 2 == 0 ? 1.0f : 0.0f)) << i;
    if (i % 2 == 0) {
      EXPECT_GT(std::abs(plain.value[i] - static_cast<float>(i)), 1e5f) << i;  // the baseline is dragged
    }
  }
  EXPECT_EQ(median.decisions[5].weight, 0.0);  // the outliers never supply a median
  EXPECT_EQ(trimmed.decisions[5].score, 0.0);  // nor survive the trim
  EXPECT_DOUBLE_EQ(median.decisions[0].weight + median.decisions[1].weight + median.decisions[2].weight +
                       median.decisions[3].weight + median.decisions[4].weight + median.decisions[6].weight,
                   1.0);

  // A NaN candidate is left out, not sorted: the even-count median averages the two middle values.
  std::vector<Vec> with_nan = {{1.0f}, {std::numeric_limits<float>::quiet_NaN()}, {4.0f}, {2.0f}, {3.0f}};
  const Aggregate m = coordinate_median(spans(with_nan));
  EXPECT_FLOAT_EQ(m.value[0], 2.5f);
  EXPECT_EQ(m.decisions[1].verdict, Verdict::kNonFinite);
  EXPECT_NE(error_of([&] { trimmed_mean(spans(candidates), {.trim = 4}); }).find("trimmed_mean.trim = 4"),
            std::string::npos);
}

TEST(ZenoMedianAndTrimmedMean, TiesGoByWorkerIndexAndNegativesSortBelowPositives) {
  // Values 1, -3, 1, 1, -0.5: sorted -3 (w1), -0.5 (w4), 1 (w0), 1 (w2), 1 (w3); the middle is w0's 1.
  const std::vector<Vec> candidates = {{1.0f}, {-3.0f}, {1.0f}, {1.0f}, {-0.5f}};
  const Aggregate median = coordinate_median(spans(candidates));
  EXPECT_EQ(median.value[0], 1.0f);
  EXPECT_EQ(median.decisions[0].weight, 1.0);
  EXPECT_EQ(median.decisions[2].weight, 0.0);
  // Trim 1 each side: keeps -0.5 (w4), 1 (w0), 1 (w2); w3's equal 1 is trimmed as the higher index.
  const Aggregate trimmed = trimmed_mean(spans(candidates), {.trim = 1});
  EXPECT_FLOAT_EQ(trimmed.value[0], 0.5f);
  EXPECT_EQ(trimmed.decisions[3].score, 0.0);
  EXPECT_EQ(trimmed.decisions[2].score, 1.0);
  // 17 candidates: past the sorting networks, std::sort gives the same order.
  std::vector<Vec> many;
  for (int w = 0; w < 17; ++w) many.push_back({static_cast<float>((w * 7) % 17) - 8.0f});
  EXPECT_EQ(coordinate_median(spans(many)).value[0], 0.0f);
}

TEST(ZenoCenteredClipping, BoundsAnOutliersInfluence) {
  const Vec honest = random_vector(30, 12);
  std::vector<Vec> candidates(5, honest);
  candidates.push_back(scaled(honest, 1e6));
  const CenteredClippingConfig config{.tau = 1.0, .iterations = 3};
  const Aggregate result = centered_clipping(spans(candidates), honest, config);
  Vec moved(30);
  for (std::size_t i = 0; i < 30; ++i) moved[i] = result.value[i] - honest[i];
  // Each iteration the outlier moves the centre by at most tau / n; the honest pull only brings it back.
  EXPECT_LE(norm(moved), config.tau * 3 / 6 + 1e-5);
  EXPECT_GT(norm(moved), 0.0);
  EXPECT_LT(result.decisions[5].weight, 1e-5);  // clipped hard
  EXPECT_GT(result.decisions[5].score, 1e5);    // far from the centre
  EXPECT_DOUBLE_EQ(result.decisions[0].weight, 1.0 / 6);
  const Aggregate plain = mean(spans(candidates));
  EXPECT_GT(std::abs(plain.value[0] - honest[0]), 1e3 * std::abs(honest[0]));
}

TEST(ZenoRules, EveryRuleThroughTheRegistryKeepsHonestAndDropsSignFlipped) {
  const PlantedCluster planted;
  const auto candidates = spans(planted.candidates);
  const Vec v = planted.honest;
  const Quadratic loss{Vec(40, 0.0f)};  // gradient at x = v is v: honest updates descend
  for (const RuleInfo& info : rule_infos()) {
    RuleConfig config{.kind = info.kind};
    config.trimmed_mean.trim = 3;
    config.krum = {.byzantine = 2, .select = 5};
    config.zeno.drop = 3;
    config.centered_clipping.tau = 0.5;
    const RuleInputs inputs{
        .candidates = candidates, .reference = v, .params = v, .loss = std::cref(loss), .center = v};
    const Aggregate result = aggregate(config, inputs);
    ASSERT_EQ(result.value.size(), 40u) << info.name;
    ASSERT_EQ(result.decisions.size(), 8u) << info.name;
    // The sign-flipped x10 cluster drags the plain mean to the wrong side; every robust rule stays close.
    const double error = std::sqrt(squared_distance(result.value, v)) / norm(v);
    if (info.kind == RuleKind::kMean) {
      EXPECT_GT(error, 3.0) << info.name;
    } else {
      EXPECT_LT(error, 0.5) << info.name;
    }
    if (info.kind == RuleKind::kZeno || info.kind == RuleKind::kZenoPs ||
        info.kind == RuleKind::kZenoPlusPlus || info.kind == RuleKind::kMultiKrum) {
      for (std::size_t w = 0; w < 8; ++w) {
        EXPECT_EQ(result.decisions[w].accepted, !PlantedCluster::is_attacker(w))
            << info.name << " worker " << w;
      }
    }
  }
}

TEST(ZenoRules, BadConfigNamesFieldValueAndFix) {
  RuleConfig config{.kind = RuleKind::kZenoPs};
  config.zenops.norm_bound = -1;
  const std::string error = error_of([&] { validate(config); });
  EXPECT_NE(error.find("zenops.norm_bound = -1"), std::string::npos) << error;
  EXPECT_NE(error.find("1.6"), std::string::npos) << error;
  config = {.kind = RuleKind::kZenoPlusPlus};
  config.zenopp.epsilon = std::nan("");
  EXPECT_NE(error_of([&] { validate(config); }).find("zenopp.epsilon"), std::string::npos);
  config = {.kind = RuleKind::kCenteredClipping};
  config.centered_clipping.iterations = 0;
  EXPECT_NE(error_of([&] { validate(config); }).find("centered_clipping.iterations = 0"), std::string::npos);
  const std::vector<Vec> uneven = {Vec(3), Vec(4)};
  EXPECT_NE(error_of([&] { mean(spans(uneven)); }).find("candidate 1 has 4 floats"), std::string::npos);
  EXPECT_NE(error_of([&] { mean({}); }).find("no candidates"), std::string::npos);

  // A non-finite v or x is the validator's own divergence: an error, never a silent NaN aggregate.
  const std::vector<Vec> two = {Vec(3, 1.0f), Vec(3, 2.0f)};
  const Vec broken = {1.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f};
  EXPECT_NE(error_of([&] {
              zenops(spans(two), broken, {}, {});
            }).find("reference (the validator's update v) has NaN"),
            std::string::npos);
  EXPECT_NE(error_of([&] { zeno_plus_plus(spans(two), broken, {}); }).find("NaN or Inf"), std::string::npos);
  EXPECT_NE(error_of([&] { centered_clipping(spans(two), broken, {}); }).find("center has NaN"),
            std::string::npos);
  const LossFn nan_loss = [](std::span<const float>) { return std::nan(""); };
  EXPECT_NE(error_of([&] {
              zeno(spans(two), Vec(3, 0.0f), nan_loss, {});
            }).find("f_r(x) at the current model is nan"),
            std::string::npos);
}

// ---------------------------------------------------------------- attacks

TEST(ZenoAttacks, SignFlipIsExact) {
  const Vec u = random_vector(333, 13);
  const Vec out = sign_flip(u, {.scale = 4});
  ASSERT_EQ(out.size(), u.size());
  for (std::size_t i = 0; i < u.size(); ++i) ASSERT_EQ(out[i], -4.0f * u[i]) << i;
}

TEST(ZenoAttacks, GaussianHasTheRequestedMeanAndSigma) {
  RandomStream rng = attack_stream(1, 0, 0);
  const std::size_t n = 200000;
  const Vec out = gaussian(n, {.sigma = 2.5}, rng);
  ASSERT_EQ(out.size(), n);
  double sum = 0, sum2 = 0;
  for (const float x : out) {
    sum += x;
    sum2 += double(x) * x;
  }
  const double mean = sum / n;
  const double sigma = std::sqrt(sum2 / n - mean * mean);
  EXPECT_LT(std::abs(mean), 5 * 2.5 / std::sqrt(double(n)));               // 5 standard errors
  EXPECT_LT(std::abs(sigma - 2.5), 5 * 2.5 / std::sqrt(2.0 * double(n)));  // 5 standard errors
}

TEST(ZenoAttacks, NormMatchedHasTheScaledNormAndAnUnrelatedDirection) {
  const Vec u = random_vector(5000, 14);
  RandomStream rng = attack_stream(1, 0, 1);
  const Vec out = norm_matched(u, {.scale = 8}, rng);
  EXPECT_NEAR(norm(out), 8 * norm(u), 1e-5 * 8 * norm(u));
  EXPECT_LT(std::abs(dot(out, u)) / (norm(out) * norm(u)), 0.1);  // random: ~1/sqrt(5000) = 0.014
}

TEST(ZenoAttacks, LabelFlipMapsYToNineMinusY) {
  const std::vector<std::uint8_t> map = label_flip_map(10);
  for (int y = 0; y < 10; ++y) EXPECT_EQ(map[static_cast<std::size_t>(y)], 9 - y);
  std::vector<std::uint8_t> labels = {0, 3, 9, 4, 5};
  flip_labels(labels);
  EXPECT_EQ(labels, (std::vector<std::uint8_t>{9, 6, 0, 5, 4}));
  std::vector<std::uint8_t> bad = {1, 10};
  EXPECT_NE(error_of([&] { flip_labels(bad); }).find("label 10 at sample 1"), std::string::npos);
  RandomStream rng = attack_stream(1, 0, 0);
  const Vec u(4, 1.0f);
  EXPECT_NE(
      error_of([&] { apply_attack({.kind = AttackKind::kLabelFlip}, {.own = u}, rng); }).find("data attack"),
      std::string::npos);
}

TEST(ZenoAttacks, BitFlipChangesExactlyTheCountedElementsByTheMask) {
  const Vec u = random_vector(10000, 15);
  RandomStream rng = attack_stream(2, 5, 3);
  const BitFlipConfig config{.rate = 0.0123, .bits = {30, 22}};
  const Vec out = bit_flip(u, config, rng);
  EXPECT_EQ(bit_flip_count(10000, 0.0123), 123u);
  std::size_t changed = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    const std::uint32_t diff = std::bit_cast<std::uint32_t>(u[i]) ^ std::bit_cast<std::uint32_t>(out[i]);
    if (diff != 0) {
      ++changed;
      ASSERT_EQ(diff, (1u << 30) | (1u << 22)) << i;
    }
  }
  EXPECT_EQ(changed, 123u);
  RandomStream all = attack_stream(2, 5, 3);
  EXPECT_EQ(std::ranges::count_if(bit_flip(u, {.rate = 1.0, .bits = {31}}, all),
                                  [](float x) { return std::signbit(x); }),
            std::ranges::count_if(u, [](float x) { return !std::signbit(x); }));
  EXPECT_NE(error_of([&] { bit_flip(u, {.bits = {32}}, rng); }).find("bit_flip.bits[] = 32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { bit_flip(u, {.bits = {3, 3}}, rng); }).find("listed once"), std::string::npos);
}

TEST(ZenoAttacks, AlieIsMeanMinusZStdWithinTheHonestRange) {
  EXPECT_NEAR(alie_z(50, 12), 0.5828, 1e-4);  // the paper's example: s = 14, Phi^-1(36/50)
  EXPECT_NEAR(alie_z(8, 3), 0.6745, 1e-4);    // s = 2, Phi^-1(6/8)
  // Per coordinate five evenly spaced values base + k * spread, k = -2..2, in a rotating worker order:
  // the sample std is 1.58 spread, so mean - z std (z = 0.67) lies inside [base - 2 spread, base + 2 spread].
  const Vec base = random_vector(2000, 30, 0.5), spread = random_vector(2000, 31, 0.0, 0.3);
  std::vector<Vec> honest(5, Vec(2000));
  for (std::size_t i = 0; i < 2000; ++i) {
    for (std::size_t w = 0; w < 5; ++w) {
      honest[w][i] = base[i] + static_cast<float>(static_cast<int>((w + i) % 5) - 2) * spread[i];
    }
  }
  const Vec out = alie(spans(honest), {.workers = 8, .byzantine = 3});
  ASSERT_EQ(out.size(), 2000u);
  const double z = alie_z(8, 3);
  for (std::size_t i = 0; i < out.size(); ++i) {
    double mean = 0, var = 0, lo = 1e30, hi = -1e30;
    for (const Vec& h : honest) {
      mean += h[i] / 5.0;
      lo = std::min<double>(lo, h[i]);
      hi = std::max<double>(hi, h[i]);
    }
    for (const Vec& h : honest) var += (h[i] - mean) * (h[i] - mean) / 4.0;
    ASSERT_NEAR(out[i], mean - z * std::sqrt(var), 1e-5) << i;
    ASSERT_GE(out[i], lo) << i;
    ASSERT_LE(out[i], hi) << i;
  }
  EXPECT_NE(error_of([&] { alie(spans(honest), {.workers = 8, .byzantine = 5}); }).find("alie.byzantine = 5"),
            std::string::npos);
}

TEST(ZenoAttacks, IpmHasNegativeInnerProductWithTheHonestMean) {
  std::vector<Vec> honest;
  for (std::uint64_t w = 0; w < 4; ++w) honest.push_back(random_vector(500, 40 + w, 0.2));
  const Vec mean = mean_of(honest);
  const Vec out = ipm(spans(honest), {.epsilon = 0.5});
  EXPECT_NEAR(dot(out, mean), -0.5 * squared_norm(mean), 1e-5 * squared_norm(mean));
  EXPECT_LT(dot(out, mean), 0);
  EXPECT_NE(error_of([&] { ipm({}, {}); }).find("no honest updates"), std::string::npos);
}

TEST(ZenoAttacks, ValidatorAttackPassesZenoPsNarrowlyWithSmallCosineAndOrthogonalHarm) {
  const std::size_t d = 3000;
  const Vec v = random_vector(d, 50);
  std::vector<Vec> honest;
  for (std::uint64_t w = 0; w < 5; ++w) honest.push_back(plus(v, scaled(random_vector(d, 60 + w), 0.5)));
  const ValidatorAttackConfig config{.rho = 0.01, .norm_bound = 1.6, .margin = 0.01, .norm_fraction = 0.5};
  RandomStream rng = attack_stream(4, 0, 0);
  const Vec u = validator_attack(spans(honest), v, {}, config, rng);
  const Moments m = moments(u, v);
  EXPECT_GT(m.uv, 0.01 * m.vv);                    // passes the inner-product test ...
  EXPECT_NEAR(m.uv / m.vv, 0.02, 1e-4);            // ... by the margin only
  EXPECT_NEAR(m.uu / m.vv, 0.5 * 1.6, 1e-4);       // and the norm test with room to spare
  EXPECT_LT(m.uv / std::sqrt(m.uu * m.vv), 0.03);  // cosine 0.02 / sqrt(0.8) = 0.022
  // The orthogonal part points against the honest consensus.
  EXPECT_LT(dot(u, mean_of(honest)), 0);
  const std::vector<Vec> candidates = {u};
  const Aggregate judged = zenops(spans(candidates), v, {}, ZenoPsConfig{.rho = 0.01, .per_tensor = false});
  EXPECT_TRUE(judged.decisions[0].accepted);

  // Per tensor, each tensor passes on its own.
  const std::vector<TensorSlice> layout = {{0, 1000}, {1000, 2000}};
  RandomStream rng2 = attack_stream(4, 0, 0);
  const Vec per = validator_attack(spans(honest), v, layout, config, rng2);
  const std::vector<Vec> per_candidates = {per};
  const Aggregate per_judged = zenops(spans(per_candidates), v, layout, ZenoPsConfig{.rho = 0.01});
  EXPECT_TRUE(per_judged.decisions[0].accepted);
  EXPECT_NE(error_of([&] {
              validator_attack(spans(honest), v, {}, {.rho = 1.0, .margin = 0.5, .norm_fraction = 0.5}, rng);
            }).find("validator.margin"),
            std::string::npos);
}

TEST(ZenoAttacks, SameSeedSameBytesOtherStreamOtherBytes) {
  const Vec u = random_vector(4096, 70);
  std::vector<Vec> honest;
  for (std::uint64_t w = 0; w < 3; ++w) honest.push_back(random_vector(4096, 80 + w));
  const Vec v = random_vector(4096, 90);
  for (const AttackInfo& info : attack_infos()) {
    if (info.kind == AttackKind::kLabelFlip) continue;
    AttackConfig config{.kind = info.kind};
    config.alie = {.workers = 6, .byzantine = 2};
    config.bit_flip.rate = 0.01;
    const auto views = spans(honest);
    const AttackInputs inputs{.own = u, .honest = views, .reference = v};
    RandomStream a = attack_stream(11, 3, 2), b = attack_stream(11, 3, 2), c = attack_stream(11, 3, 5);
    const Vec first = apply_attack(config, inputs, a);
    const Vec second = apply_attack(config, inputs, b);
    const Vec other = apply_attack(config, inputs, c);
    ASSERT_EQ(first.size(), u.size()) << info.name;
    EXPECT_TRUE(same_bytes(first, second)) << info.name;
    if (info.kind == AttackKind::kGaussian || info.kind == AttackKind::kNormMatched ||
        info.kind == AttackKind::kBitFlip) {
      EXPECT_FALSE(same_bytes(first, other)) << info.name << ": another worker's stream must differ";
    }
  }
  RandomStream unused = attack_stream(0, 0, 0);
  EXPECT_TRUE(same_bytes(apply_attack({}, {.own = u}, unused), u));  // kNone: the honest update as is
}

}  // namespace
}  // namespace pstwin::zeno
