#include "zeno/robust_training.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "train/local_sgd.hpp"

namespace pstwin::zeno {
namespace {

bool needs_validator(RuleKind kind) {
  return kind == RuleKind::kZeno || kind == RuleKind::kZenoPs || kind == RuleKind::kZenoPlusPlus ||
         kind == RuleKind::kValidationOnly;
}

// An attacker: its honest step, then (in the rounds it attacks) the attack in place of the gradient.
// Omniscient attacks (ALIE, IPM) see the honest workers' gradients at the attacker's parameters on
// fresh batches of their shards ("zeno.shadow" streams): the same distribution as the round's real
// batches, at one extra step per honest worker and attacked round.
class AttackingSource final : public GradientSource {
 public:
  AttackingSource(const train::MlpTraining& training, const Scenario& scenario, const AttackConfig& config,
                  const AttackPlan& plan, int rank)
      : training_(training),
        config_(config),
        plan_(plan),
        rank_(rank),
        seed_(scenario.seed),
        local_(scenario.train.local_steps),
        momentum_(training.worker_momentum()) {
    if (scenario.zeno.per_tensor)
      for (const auto& t : training.model().tensors()) tensors_.push_back({t.offset, t.size()});
    const auto& shards = training.shards();
    const auto batch = static_cast<std::size_t>(scenario.train.batch);
    own_ = training.trainer(shards.workers.at(static_cast<std::size_t>(rank)), batch,
                            RandomStream(seed_, "train.batches", static_cast<std::uint64_t>(rank)));
    if (config.kind == AttackKind::kAlie || config.kind == AttackKind::kIpm) {
      for (int w = 0; w < scenario.roles.workers; ++w) {
        const bool fixed = !scenario.attack.byzantine.empty();
        if (w == rank || (fixed && plan.may_attack(w))) continue;
        shadow_momenta_.push_back(training.worker_momentum());
        shadows_.push_back(training.trainer(
            shards.workers.at(static_cast<std::size_t>(w)), batch,
            RandomStream(seed_, "zeno.shadow",
                         (static_cast<std::uint64_t>(rank) << 32) | static_cast<unsigned>(w))));
      }
    }
  }

  void step(std::uint32_t round, std::span<const float> params, std::span<float> grad) override {
    const bool attack = plan_.attacks(rank_, round);
    const float lr = training_.learning_rate(round);
    if (config_.kind == AttackKind::kLabelFlip) {
      static const auto kFlip = label_flip_map(10);
      static const std::vector<std::uint8_t> kSame{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
      own_->set_label_map(attack ? kFlip : kSame);
      local_.run(*own_, params, grad, lr);
      if (momentum_) momentum_->apply(params, grad);
      return;
    }
    local_.run(*own_, params, grad, lr);
    if (momentum_) momentum_->apply(params, grad);
    if (!attack) return;
    std::vector<std::vector<float>> honest(shadows_.size(), std::vector<float>(grad.size()));
    std::vector<std::span<const float>> views;
    for (std::size_t i = 0; i < shadows_.size(); ++i) {
      local_.run(*shadows_[i], params, honest[i], lr);
      if (shadow_momenta_[i]) shadow_momenta_[i]->apply(params, honest[i]);
      views.emplace_back(honest[i]);
    }
    RandomStream rng = attack_stream(seed_, round, static_cast<std::uint32_t>(rank_));
    // The validator attack has no v: its estimate is the attacker's own honest update (same model,
    // same kind of batch), and it knows no other worker's update, so its harm is a random direction
    // orthogonal to that estimate (docs/ZENO.md).
    const bool aimed = config_.kind == AttackKind::kValidator;
    const auto sent = apply_attack(
        config_,
        AttackInputs{.own = grad,
                     .honest = views,
                     .reference = aimed ? std::span<const float>(grad) : std::span<const float>{},
                     .tensors = tensors_},
        rng);
    std::copy(sent.begin(), sent.end(), grad.begin());
  }
  double flops_per_step() const override { return own_->flops_per_step() * local_.steps(); }

 private:
  const train::MlpTraining& training_;
  const AttackConfig& config_;
  const AttackPlan& plan_;
  int rank_;
  std::uint64_t seed_;
  train::LocalSgd local_;  // train.local_steps: the attacker's honest update is H steps too
  // train.worker_momentum: the attacker's honest momentum, and each shadow's (updated in the rounds it
  // attacks: every round for fixed attackers, a sample of them with attack.probability)
  std::optional<train::WorkerMomentum> momentum_;
  std::vector<std::optional<train::WorkerMomentum>> shadow_momenta_;
  std::unique_ptr<train::ShardTrainer> own_;
  std::vector<std::unique_ptr<train::ShardTrainer>> shadows_;
  std::vector<TensorSlice> tensors_;  // validator attack: per tensor as zeno.per_tensor judges
};

[[noreturn]] void bad(const std::string& field, const std::string& value, const std::string& why) {
  throw ScenarioError(field + " = " + value + ": " + why);
}

}  // namespace

RuleConfig rule_config(const Scenario& sc) {
  const auto& z = sc.zeno;
  RuleConfig c;
  try {
    c.kind = parse_rule(z.rule);
    c.zenopp.scaling = parse_scaling(z.scaling);
  } catch (const std::invalid_argument& e) {
    bad("zeno.rule", "\"" + z.rule + "\"", e.what());
  }
  c.trimmed_mean.trim = static_cast<std::size_t>(z.trim);
  c.krum.byzantine = static_cast<std::size_t>(z.krum_byzantine);
  c.krum.select = static_cast<std::size_t>(z.krum_select);
  c.centered_clipping.tau = z.clip_tau;
  c.centered_clipping.iterations = static_cast<std::size_t>(z.clip_iterations);
  c.zeno.gamma = z.gamma;
  c.zeno.rho = z.rho;
  c.zeno.drop = static_cast<std::size_t>(z.drop);
  c.zenops.rho = z.zenops_rho;
  c.zenops.norm_bound = z.norm_bound;
  c.zenops.per_tensor = z.per_tensor;
  c.zenopp.gamma = z.gamma;
  c.zenopp.rho = z.zenopp_rho;
  c.zenopp.epsilon = z.epsilon;
  c.zenopp.reverse_rejected = z.reverse_rejected;
  c.zenopp.clip_factor = z.clip_factor;
  try {
    validate(c);
  } catch (const std::invalid_argument& e) {
    throw ScenarioError(std::string("[zeno]: ") + e.what());
  }
  const int validators = sc.roles.validators;
  const bool async = sc.ps.mode == TrainingMode::kAsync;
  if (validators == 0 && needs_validator(c.kind))
    bad("zeno.rule", "\"" + z.rule + "\"",
        "scores updates against held-out data: set roles.validators = 1 or 2");
  if (validators == 0 && async && c.kind != RuleKind::kMean)
    bad("zeno.rule", "\"" + z.rule + "\"",
        "async servers apply each push on arrival, so they cannot combine several: use validators "
        "(roles.validators >= 1 with zeno++ or zenops) or ps.mode = \"sync\"");
  if (validators > 0 && async && c.kind != RuleKind::kZenoPlusPlus && c.kind != RuleKind::kZenoPs &&
      c.kind != RuleKind::kMean)
    bad("zeno.rule", "\"" + z.rule + "\"",
        "async validators judge each update alone: use zeno++, zenops or mean (validation-only is a "
        "baseline of sync rounds: set ps.mode = \"sync\")");
  // Per-validator candidate counts: the workers of rank % validators == v.
  const int per_validator = validators > 0 ? sc.roles.workers / validators : sc.roles.workers;
  if (c.kind == RuleKind::kZeno && !async && static_cast<int>(c.zeno.drop) >= per_validator)
    bad("zeno.drop", std::to_string(z.drop),
        "must be below the updates each validator judges per round (" + std::to_string(per_validator) + ")");
  if ((c.kind == RuleKind::kKrum || c.kind == RuleKind::kMultiKrum) &&
      per_validator < 2 * static_cast<int>(c.krum.byzantine) + 3)
    bad("zeno.krum_byzantine", std::to_string(z.krum_byzantine),
        "krum needs at least 2f + 3 candidates per aggregation, there are " + std::to_string(per_validator));
  if (c.kind == RuleKind::kTrimmedMean && per_validator <= 2 * static_cast<int>(c.trimmed_mean.trim))
    bad("zeno.trim", std::to_string(z.trim),
        "needs more than 2 * trim candidates per aggregation, there are " + std::to_string(per_validator));
  return c;
}

AttackConfig attack_config(const Scenario& sc) {
  const auto& a = sc.attack;
  AttackConfig c;
  try {
    c.kind = parse_attack(a.kind);
  } catch (const std::invalid_argument& e) {
    bad("attack.kind", "\"" + a.kind + "\"", e.what());
  }
  c.validator.rho = sc.zeno.zenops_rho;  // the attacker is assumed to know the validator's settings
  c.validator.norm_bound = sc.zeno.norm_bound;
  c.validator.margin = a.margin;
  c.validator.norm_fraction = a.norm_fraction;
  c.sign_flip.scale = a.scale;
  c.norm_matched.scale = a.scale;
  c.gaussian.sigma = a.sigma;
  c.ipm.epsilon = a.epsilon;
  c.bit_flip.rate = a.bit_rate;
  const auto workers = static_cast<std::size_t>(sc.roles.workers);
  const auto attackers =
      !a.byzantine.empty()
          ? a.byzantine.size()
          : static_cast<std::size_t>(std::lround(a.probability * static_cast<double>(workers)));
  c.alie.workers = workers;
  c.alie.byzantine = std::clamp<std::size_t>(attackers, 1, std::max<std::size_t>(1, workers / 2));
  c.alie.z = a.alie_z;
  try {
    validate(c);
  } catch (const std::invalid_argument& e) {
    throw ScenarioError(std::string("[attack]: ") + e.what());
  }
  return c;
}

AttackPlan::AttackPlan(const Scenario& sc)
    : kind_(attack_config(sc).kind),
      byzantine_(sc.attack.byzantine),
      probability_(sc.attack.probability),
      seed_(sc.seed) {}

bool AttackPlan::may_attack(int worker) const {
  if (kind_ == AttackKind::kNone) return false;
  if (probability_ > 0) return true;
  return std::ranges::find(byzantine_, static_cast<std::uint64_t>(worker)) != byzantine_.end();
}

bool AttackPlan::attacks(int worker, std::uint64_t round) const {
  if (kind_ == AttackKind::kNone) return false;
  if (probability_ > 0) {
    RandomStream who(seed_, "zeno.attack.who", (round << 32) | static_cast<std::uint32_t>(worker));
    return who.uniform(0, 1) < probability_;
  }
  return may_attack(worker);
}

RobustTraining::RobustTraining(const Scenario& scenario, MlpStepFactory device_step)
    : scenario_(scenario),
      inner_(scenario, std::move(device_step)),
      rule_(rule_config(scenario)),
      attack_(attack_config(scenario)),
      plan_(scenario) {}

std::unique_ptr<GradientSource> RobustTraining::worker(int rank) const {
  if (!plan_.may_attack(rank)) return inner_.worker(rank);
  return std::make_unique<AttackingSource>(inner_, scenario_, attack_, plan_, rank);
}

std::vector<CandidateJudgement> RobustCombiner::combine(std::uint64_t key,
                                                        std::span<const std::span<const float>> gradients,
                                                        std::span<float> out) const {
  if (rule_.kind == RuleKind::kMean) return mean_.combine(key, gradients, out);  // bit for bit the plain path
  RuleInputs inputs{.candidates = gradients};
  std::vector<float>* center = nullptr;
  if (rule_.kind == RuleKind::kCenteredClipping) {
    std::lock_guard lock(centers_mutex_);
    center = &centers_[key];
  }
  if (center != nullptr && center->size() == out.size()) inputs.center = *center;
  const Aggregate result = aggregate(rule_, inputs);
  std::copy(result.value.begin(), result.value.end(), out.begin());
  if (center != nullptr) *center = result.value;
  std::vector<CandidateJudgement> judgements;
  judgements.reserve(result.decisions.size());
  const auto candidates = static_cast<double>(result.decisions.size());
  for (const auto& decision : result.decisions)
    judgements.push_back({.worker = -1,
                          .accepted = decision.accepted,
                          .share = decision.weight * candidates,
                          .verdict = verdict_name(decision.verdict)});
  return judgements;
}

std::unique_ptr<TrainingModel> make_training(const Scenario& scenario) {
  if (scenario.workload.kind != WorkloadKind::kMlp) return nullptr;
  return std::make_unique<RobustTraining>(scenario);
}

}  // namespace pstwin::zeno
