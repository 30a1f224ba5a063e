// What a push does to a key (ps-lite's request handle). The Aggregator (aggregator.hpp) owns a key's
// rounds, its engine lane, the parked pulls and the one place a round completes; an UpdateRule decides
// how the inputs of a round, or one async push, become the key's value:
//   SumRule        synthetic tensors: sync folds each push into the round's sum as it arrives (COPY_FIRST,
//                  SUM_RECV); async adds each push to the store.
//   SgdRule        workload.kind = "mlp": sync keeps each worker's gradient and, once all are in, combines
//                  them in worker-rank order (the mean, or src/zeno's robust rule: a GradientCombiner) and
//                  applies SGD; async applies each gradient on arrival, scaled by 1 / workers.
//   ValidatedRule  ZenoPS validators: a worker's push is sent on to its validator, not applied; the
//                  validators' weighted sums are the inputs (sync: summed in validator-rank order once
//                  all are in; async: each applied on arrival).
// Every method marked "lane" runs on the key's engine lane and touches only the state it is given.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/message.hpp"
#include "core/payload.hpp"
#include "core/types.hpp"
#include "ps/candidate_judgement.hpp"
#include "ps/round_plan.hpp"
#include "ps/workload.hpp"

namespace pstwin {

class TrainingModel;

// One sync round of one key.
struct Round {
  std::shared_ptr<ByteBuffer> sum;  // the aggregate; null until the first input (or for phantom payloads)
  std::uint64_t bytes = 0;
  bool phantom = false;
  std::vector<int> contributors;                 // ranks (workers, or validators) whose input this round took
  std::vector<int> forwarded;                    // ValidatedRule: worker ranks whose push went to a validator
  std::vector<int> late;                         // ps.backup_workers: ranks whose push came after completion
  std::vector<std::shared_ptr<Payload>> inputs;  // rules that apply whole rounds: by contributor rank
  std::vector<int> absent;  // workers whose push the round was applied without (lost, or late backups)
  std::vector<CandidateJudgement> judgements;  // a robust combiner's, by worker (reported at completion)
  std::vector<bool> pulled_by;  // ... which workers' pulls were answered (freeing the round needs all live)
  int inputs_applied = 0;
  std::vector<Message> waiting_pulls;
  int pulls_answered = 0;
  bool applying = false;  // the round's apply is queued (on the last input's task, or by apply_whole_round)
  bool applied_whole = false;  // ... by apply_whole_round, which completes it itself
  bool complete = false;
};

// One key of the store.
struct KeyState {
  int lane = 0;
  std::map<std::uint32_t, Round> rounds;  // sync: live iterations (at most two)
  std::shared_ptr<ByteBuffer> store;      // async; training: the key's parameters
  std::uint64_t store_bytes = 0;
  std::vector<float> velocity;  // training: SGD momentum of the key's slice
  std::uint64_t version = 0;    // async with ps.max_staleness: pushes applied to the key
  int lost_workers = 0;         // async: workers declared lost (an update is scaled to the survivors)
};

// How a sync round's gradients (in worker-rank order) become one update. A robust rule also says
// what it made of each gradient, in the same order (none: the plain mean judges nothing).
class GradientCombiner {
 public:
  virtual ~GradientCombiner() = default;
  virtual std::vector<CandidateJudgement> combine(std::uint64_t key,
                                                  std::span<const std::span<const float>> gradients,
                                                  std::span<float> out) const = 0;
};

// The mean, summed in rank order (the same bits whatever the arrival order, in either backend).
class MeanCombiner final : public GradientCombiner {
 public:
  std::vector<CandidateJudgement> combine(std::uint64_t key,
                                          std::span<const std::span<const float>> gradients,
                                          std::span<float> out) const override;
};

class UpdateRule {
 public:
  virtual ~UpdateRule() = default;
  virtual std::string_view name() const = 0;

  // Whose pushes are a sync round's inputs: workers', or (ValidatedRule) validators'.
  virtual Role input_role() const { return Role::kWorker; }
  // True when a worker's push is sent on to a validator instead of being an input here.
  virtual bool forwards_worker_pushes() const { return false; }
  // A key seen for the first time: its initial value (training: the model's slice).
  virtual void init_key(std::uint64_t /*key*/, KeyState& /*state*/) const {}
  // The payload size an input for `key` must have (0: any).
  virtual std::uint64_t input_bytes(std::uint64_t /*key*/) const { return 0; }

  // sync: true if each input is folded in as it arrives (fold), false if the round is applied once
  // every input is in (apply_round).
  virtual bool folds_each_input() const = 0;
  // lane
  virtual void fold(Round& /*round*/, const std::shared_ptr<Payload>& /*input*/) const {}
  // lane: applies the round's inputs (by contributor rank, null for none) to the key's store, then
  // snapshots the result into round.sum, the aggregate the round's pulls return.
  virtual void apply_round(std::uint64_t /*key*/, KeyState& /*state*/, Round& /*round*/,
                           std::uint32_t /*iteration*/) const {}
  // lane: async, one push applied to the store.
  virtual void apply_async(std::uint64_t key, KeyState& state, const std::shared_ptr<Payload>& input,
                           std::uint32_t iteration) const = 0;

  // The rule of synthetic runs (stateless, shared).
  static const UpdateRule& sum();
};

class SumRule final : public UpdateRule {
 public:
  std::string_view name() const override { return "sum"; }
  bool folds_each_input() const override { return true; }
  void fold(Round& round, const std::shared_ptr<Payload>& input) const override;
  void apply_async(std::uint64_t key, KeyState& state, const std::shared_ptr<Payload>& input,
                   std::uint32_t iteration) const override;
};

// The rules that train a model: the store holds its parameters and inputs are applied by SGD.
class TrainingRule : public UpdateRule {
 public:
  // All must outlive the rule.
  TrainingRule(const TrainingModel& model, const SyntheticWorkload& workload, bool async);

  void init_key(std::uint64_t key, KeyState& state) const override;
  std::uint64_t input_bytes(std::uint64_t key) const override;
  bool folds_each_input() const override { return false; }
  void apply_async(std::uint64_t key, KeyState& state, const std::shared_ptr<Payload>& input,
                   std::uint32_t iteration) const override;

 protected:
  // `update` applied by SGD to the key's store; then, for a sync round, its aggregate snapshotted.
  void apply(KeyState& state, std::span<const float> update, std::uint32_t iteration) const;
  static void snapshot(const KeyState& state, Round& round);

  const TrainingModel& model_;
  const SyntheticWorkload& workload_;
  const bool async_;
};

class SgdRule final : public TrainingRule {
 public:
  // `plan`: who takes part in each round (a participant that dropped a tensor counts as a zero update).
  SgdRule(const TrainingModel& model, const SyntheticWorkload& workload, const RoundPlan& plan,
          const GradientCombiner& combiner, bool async);

  std::string_view name() const override { return "sgd"; }
  void apply_round(std::uint64_t key, KeyState& state, Round& round, std::uint32_t iteration) const override;

 private:
  const RoundPlan& plan_;
  const GradientCombiner& combiner_;
};

class ValidatedRule final : public TrainingRule {
 public:
  ValidatedRule(const TrainingModel& model, const SyntheticWorkload& workload, bool async)
      : TrainingRule(model, workload, async) {}

  std::string_view name() const override { return "validated"; }
  Role input_role() const override { return Role::kValidator; }
  bool forwards_worker_pushes() const override { return true; }
  void apply_round(std::uint64_t key, KeyState& state, Round& round, std::uint32_t iteration) const override;
};

}  // namespace pstwin
