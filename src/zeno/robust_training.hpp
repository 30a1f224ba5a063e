// Issue 4 wired into the parameter server: the scenario's [zeno] rule and [attack] around the MLP of
// [train]. RobustTraining is the TrainingModel sim and realnet build (zeno::make_training):
//   - workers: an attacked worker's GradientSource replaces its honest gradient (attack.*);
//   - servers without validators: zeno.rule combines each key's gradients (mean: today's path);
//   - validators (roles.validators > 0): zeno::Validator nodes (validator.hpp) judge whole updates.
// Who attacks is a pure function of (seed, round, worker), so every process agrees without messages.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ps/training.hpp"
#include "scenario/scenario.hpp"
#include "train/ps_training.hpp"
#include "zeno/attacks.hpp"
#include "zeno/rules.hpp"

namespace pstwin::zeno {

// [zeno] as the library's RuleConfig; ScenarioError naming the field for a bad name or value.
RuleConfig rule_config(const Scenario& scenario);
// [attack] as the library's AttackConfig (ALIE's n and f from roles.workers and the attackers).
AttackConfig attack_config(const Scenario& scenario);

// Who attacks: the ranks of attack.byzantine every round, or each (round, worker) with probability
// attack.probability drawn from RandomStream(seed, "zeno.attack.who", round << 32 | worker).
class AttackPlan {
 public:
  explicit AttackPlan(const Scenario& scenario);
  bool attacks(int worker, std::uint64_t round) const;
  bool may_attack(int worker) const;  // in some round
  bool active() const { return kind_ != AttackKind::kNone; }

 private:
  AttackKind kind_;
  std::vector<std::uint64_t> byzantine_;
  double probability_;
  std::uint64_t seed_;
};

class RobustTraining final : public TrainingModel {
 public:
  explicit RobustTraining(const Scenario& scenario);

  std::span<const float> initial_parameters() const override { return inner_.initial_parameters(); }
  std::size_t tensor_offset(int tensor) const override { return inner_.tensor_offset(tensor); }
  std::unique_ptr<GradientSource> worker(int rank) const override;
  void apply(std::span<float> params, std::span<const float> grad, std::span<float> velocity,
             std::uint32_t iteration) const override {
    inner_.apply(params, grad, velocity, iteration);
  }
  double test_accuracy(std::span<const float> params) const override { return inner_.test_accuracy(params); }
  void combine(std::uint64_t key, std::span<const std::span<const float>> gradients,
               std::span<float> out) const override;
  std::unique_ptr<Node> validator(NodeContext context, int rank,
                                  const SyntheticWorkload& workload) const override;

  const train::MlpTraining& inner() const { return inner_; }
  const RuleConfig& rule() const { return rule_; }

 private:
  const Scenario& scenario_;
  train::MlpTraining inner_;
  RuleConfig rule_;
  AttackConfig attack_;
  AttackPlan plan_;
  // centered-clipping on servers: each key's last aggregate is its next centre. Each key is only
  // touched by its engine lane; the mutex guards the map itself.
  mutable std::mutex centers_mutex_;
  mutable std::map<std::uint64_t, std::vector<float>> centers_;
};

// The training model a scenario asks for (null: synthetic workload).
std::unique_ptr<TrainingModel> make_training(const Scenario& scenario);

}  // namespace pstwin::zeno
