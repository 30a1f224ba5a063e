// A ZenoPS validator node (role validator, id kValidatorIdBase + rank). Servers forward it the pushes
// of workers with rank % validators == its rank, each tagged (round, worker, tensor key); it judges
// whole updates with zeno.rule against its own held-out shard and pushes, per key, its weighted sum
// back to the key's server.
//   sync:  round r is judged once every assigned worker's every key is in and its model is x_r (pulled
//          after round r - 1); the sum is scaled by (its workers / all workers), so the servers' sum
//          over validators is the rule's average. Then it pulls x_{r+1}.
//   async: each worker update is judged alone as soon as all its keys are in (arrival order), against
//          a reference refreshed every zeno.refresh_every judged updates from a freshly pulled model;
//          the judged step (e.g. Zeno++'s rescaled g) goes to the servers, which apply it at once.
// A slot (round, worker, key) takes one message: a copy, or a message of a judged or far-future
// round, is refused and reported (invariant "tags"); it never overwrites.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ps/ps_node.hpp"
#include "ps/round_plan.hpp"
#include "ps/workload.hpp"
#include "train/ps_training.hpp"
#include "zeno/rules.hpp"

namespace pstwin::zeno {

struct ValidatorOptions {
  bool sync = true;  // ps.mode
  int validators = 1;
  int workers = 1;
  int iterations = 1;
  std::uint64_t seed = 1;      // the validator's batches: stream "zeno.validator", its rank
  int batch = 64;              // zeno.validator_batch
  int local_steps = 1;         // zeno.local_steps: SGD steps of the validator's reference
  int worker_local_steps = 1;  // train.local_steps: what a worker's update sums
  int refresh_every = 1;       // async (Zeno++): a fresh reference every this many judged updates
};

class Validator final : public PsNode {
 public:
  // `job` and `training` must outlive the node.
  Validator(NodeContext context, int rank, ValidatorOptions options, const JobShape& job,
            const train::MlpTraining& training, const RuleConfig& rule);

 private:
  using Slot = std::tuple<std::uint32_t, int, std::uint64_t>;  // (round, worker, key)
  struct Update {
    int worker = 0;
    std::uint32_t round = 0;
  };

  void on_ready() override;
  void on_app_message(Message message) override;
  std::string describe_app_state() const override;

  void on_candidate(Message message);
  void on_pull_response(const Message& message);
  void pull_model(std::uint32_t round);
  void next();  // starts the next judgement if one is due and nothing is in progress
  std::size_t expected_keys(std::uint32_t round, int worker) const;  // RoundPlan: the keys it pushes
  // Moves the keys of (round, worker) out of candidates_ into one flat update (dropped tensors: 0).
  std::vector<float> take_update(std::uint32_t round, int worker);
  // The validator's reference at params_: its mean gradient over zeno.local_steps plain SGD steps.
  std::vector<float> reference(std::uint32_t round);
  void judge_round(std::uint32_t round);
  void judge_one(Update update);
  void send_sums(std::uint32_t round, int worker, std::span<const float> sum);
  // The compute stage's work with its exception caught into *error; fail_round reports it.
  static std::function<void()> guarded(std::shared_ptr<std::string> error, std::function<void()> work);
  void fail_round(std::uint32_t round, const std::string& error);
  std::size_t element_offset(const PartitionSpec& partition) const;

  const ValidatorOptions options_;
  const SyntheticWorkload& workload_;
  const train::MlpTraining& training_;
  const RuleConfig rule_;
  const RoundPlan& plan_;     // sync: who pushes which tensors in each round
  std::vector<int> workers_;  // assigned ranks, ascending
  std::unique_ptr<train::ShardTrainer> trainer_;
  std::vector<std::uint32_t> held_out_;
  Executor& compute_stage_;
  std::vector<float> params_;  // the model judged against
  std::vector<float> center_;  // centered clipping: the last aggregate
  std::vector<float> reference_;
  // train.worker_momentum: the workers push momenta, so v is the validator's own momentum too
  std::optional<train::WorkerMomentum> reference_momentum_;
  std::map<Slot, Payload> candidates_;
  std::map<std::pair<std::uint32_t, int>, std::size_t> parts_in_;  // (round, worker) -> keys in
  std::uint32_t round_ = 0;                                        // sync: the next round to judge
  std::deque<Update> ready_;   // async: complete updates, in completion order
  std::uint64_t judged_ = 0;   // sync: rounds judged (or being judged); async: updates judged
  bool busy_ = false;          // a judgement or a model pull is in progress
  bool model_current_ = true;  // params_ is the model of round_ (sync) / fresh (async)
  std::size_t pulls_outstanding_ = 0;
};

}  // namespace pstwin::zeno
