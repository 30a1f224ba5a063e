// ZenoPS's robustness wired into the parameter server: the scenario's [zeno] rule and [attack] around
// the MLP of [train].
//   - RobustTraining, the TrainingModel every backend builds (zeno::make_training): an attacked
//     worker's GradientSource replaces its honest gradient (attack.*);
//   - RobustCombiner, the servers' GradientCombiner without validators: zeno.rule combines each key's
//     gradients (mean: the plain path, bit for bit);
//   - validators (roles.validators > 0): zeno::Validator nodes (validator.hpp) judge whole updates;
//     roles.hpp builds them.
// Who attacks is a pure function of (seed, round, worker), so every process agrees without messages.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ps/device.hpp"
#include "ps/training.hpp"
#include "ps/update_rule.hpp"
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
  // `device_step`: honest workers' gradient steps on the device (train::MlpTraining); attackers and
  // validators compute on the CPU.
  explicit RobustTraining(const Scenario& scenario, MlpStepFactory device_step = {});

  std::span<const float> initial_parameters() const override { return inner_.initial_parameters(); }
  std::size_t tensor_offset(int tensor) const override { return inner_.tensor_offset(tensor); }
  std::unique_ptr<GradientSource> worker(int rank) const override;
  void apply(std::span<float> params, std::span<const float> grad, std::span<float> velocity,
             std::uint32_t iteration) const override {
    inner_.apply(params, grad, velocity, iteration);
  }
  double test_accuracy(std::span<const float> params) const override { return inner_.test_accuracy(params); }
  const train::MlpTraining& inner() const { return inner_; }
  const RuleConfig& rule() const { return rule_; }

 private:
  const Scenario& scenario_;
  train::MlpTraining inner_;
  RuleConfig rule_;
  AttackConfig attack_;
  AttackPlan plan_;
};

// zeno.rule on the servers of a run without validators. Thread-safe: the servers of one process share it.
class RobustCombiner final : public GradientCombiner {
 public:
  explicit RobustCombiner(const Scenario& scenario) : rule_(rule_config(scenario)) {}
  std::vector<CandidateJudgement> combine(std::uint64_t key,
                                          std::span<const std::span<const float>> gradients,
                                          std::span<float> out) const override;

 private:
  RuleConfig rule_;
  MeanCombiner mean_;
  // centered-clipping: each key's last aggregate is its next centre. Each key is only touched by its
  // engine lane; the mutex guards the map itself.
  mutable std::mutex centers_mutex_;
  mutable std::map<std::uint64_t, std::vector<float>> centers_;
};

// The training model a scenario asks for (null: synthetic workload).
std::unique_ptr<TrainingModel> make_training(const Scenario& scenario);

}  // namespace pstwin::zeno
