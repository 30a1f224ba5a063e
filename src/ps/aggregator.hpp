// The keyed store and its rounds: what a server does with pushes and pulls, shared by the server
// and by a worker-side aggregator (lb.worker_aggregators: a worker that owns a range of keys).
// sync:  per key and iteration, the first push is copied and later ones added (COPY_FIRST,
//        SUM_RECV); pulls are answered once all workers' pushes are in (ALL_RECV).
// async: every push is added to the store at once and pulls are answered at once.
// Each key is bound to the least-loaded engine lane on first sight; all work on a key runs on its
// lane, in arrival order, so no two lanes ever touch one key. With a TrainingModel a key's store holds
// its parameter slice: sync rounds keep each worker's gradient and, once all are in, sum them in
// worker-rank order (the same bits whatever the arrival order, in either backend), divide by the number
// of workers and apply SGD with the key's own momentum; pulls return the parameters. Async applies each
// gradient on arrival, scaled by 1 / workers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/payload.hpp"
#include "core/runtime.hpp"
#include "ps/observer.hpp"
#include "ps/round_plan.hpp"
#include "ps/training.hpp"
#include "ps/workload.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

class Aggregator {
 public:
  struct Round {
    std::shared_ptr<ByteBuffer> sum;  // null until the first push (or for phantom payloads)
    std::uint64_t bytes = 0;
    bool phantom = false;
    int pushes_applied = 0;
    std::vector<int> contributors;  // worker ranks, to refuse a second push in one round
    std::vector<Message> waiting_pulls;
    std::vector<std::shared_ptr<Payload>> gradients;  // training: by worker rank, until applied
    std::vector<std::shared_ptr<Payload>> verdicts;   // validators' sums, by validator rank
    int verdicts_in = 0;
    int verdicts_applied = 0;
    int pulls_answered = 0;
    bool applying = false;  // RoundPlan: a round no worker pushes to is being applied
    bool complete = false;
  };
  struct KeyState {
    int lane = 0;
    std::map<std::uint32_t, Round> rounds;  // sync: live iterations (at most two)
    std::shared_ptr<ByteBuffer> store;      // async; training: the key's parameters
    std::uint64_t store_bytes = 0;
    std::vector<float> velocity;  // training: SGD momentum of the key's slice
    std::uint64_t version = 0;    // async with ps.max_staleness: pushes applied to the key
  };

  // `name` ("server 1", "worker aggregator 2") starts failure texts; `engine`, `workload` and
  // `training` (may be null: synthetic sums) must outlive the aggregator.
  Aggregator(Runtime& runtime, const Scenario& scenario, RunObserver& observer,
             const SyntheticWorkload& workload, const TrainingModel* training, Executor& engine,
             std::string name);

  void sync_push(Message message);
  void sync_pull(Message message);
  void async_push(Message message);
  void async_pull(Message message);
  void answer_sync_pull(const Message& request, Round& round, std::uint64_t key, std::uint32_t iteration);
  // Async, at shutdown: every key's final store to the observer.
  void report_final_stores() const;
  std::string describe() const;

  KeyState& key_state(std::uint64_t key, std::uint64_t bytes);
  Executor& engine() { return engine_; }
  ComputeCost sum_cost(std::uint64_t bytes) const;
  // Training, on the key's lane: `gradients` applied to the store: combined by the training model's
  // rule (sync, no validators), else summed in order (async: divided by the number of workers).
  void apply_gradients(std::uint64_t key, KeyState& state,
                       std::span<const std::shared_ptr<Payload>> gradients, std::uint32_t iteration,
                       bool combine) const;
  // Sync training, on the key's lane: applies `inputs` (then drops them) and snapshots the parameters
  // the round's pulls return.
  void apply_round(std::uint64_t key, KeyState& state, Round& round,
                   std::vector<std::shared_ptr<Payload>>& inputs, std::uint32_t iteration,
                   bool combine) const;

 private:
  void reply(const Message& request, Payload payload = {});
  // RoundPlan: every participant dropped this key's tensor; the round is applied (zero updates) on
  // its first pull.
  void apply_unpushed_round(std::uint64_t key, KeyState& state, Round& round, std::uint32_t iteration);
  // ps.max_staleness: true if `message` (an async push) is within the bound; refused ones are
  // acknowledged (a fused one answered like a pull) and never applied.
  bool admit_by_staleness(Message& message, KeyState& state);

  Runtime& rt_;
  const Scenario& scenario_;
  RunObserver& observer_;
  const SyntheticWorkload& workload_;
  const TrainingModel* training_;
  RoundPlan plan_;  // train.participation / train.drop_rate: the pushes each sync round gets
  Executor& engine_;
  std::string name_;
  std::vector<std::uint64_t> lane_bytes_;
  std::map<std::uint64_t, KeyState> keys_;
  // ps.max_staleness: the key version each worker last pulled, by (key, worker rank).
  std::map<std::pair<std::uint64_t, int>, std::uint64_t> pulled_version_;
};

}  // namespace pstwin
