// The keyed store and its rounds: what a server does with pushes and pulls, and the one answer to
// "where does a server aggregate". A Server owns one; so does a worker that aggregates a range of keys
// (lb.worker_aggregators). What a push does to a key is its UpdateRule's (update_rule.hpp: sum, SGD,
// a robust rule, validators' sums); this class owns everything else:
//   sync:  per key and iteration a Round takes one input per contributor; its pulls park until the
//          round completes (complete_round, the only place that answers them).
//   async: every push is applied at once and pulls are answered at once (a snapshot on the key's lane);
//          ps.max_staleness refuses pushes computed on a model too old.
//   ps.local_reduce: a round takes one input per host, its root's sum of the host's workers; the
//          root's push counts as each of theirs (push_applied), only roots pull.
//   ZenoPS: a worker's push is sent on to its validator (rank % validators); async, that worker's next
//          pull of the key waits until the validator's judgement of it is applied.
// Each key is bound to the least-loaded engine lane on first sight; all work on a key runs on its lane,
// in arrival order, so no two lanes ever touch one key.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/payload.hpp"
#include "core/runtime.hpp"
#include "ps/host_groups.hpp"
#include "ps/observer.hpp"
#include "ps/role_options.hpp"
#include "ps/round_plan.hpp"
#include "ps/update_rule.hpp"
#include "ps/workload.hpp"

namespace pstwin {

class Aggregator {
 public:
  // `name` ("server 1", "worker aggregator 2") starts failure texts; `job`, `rule` and `engine` must
  // outlive the aggregator.
  Aggregator(Runtime& runtime, AggregatorOptions options, RunObserver& observer, const JobShape& job,
             const UpdateRule& rule, Executor& engine, std::string name);

  // A push, push_pull or pull request, from a worker or a validator.
  void handle(Message request);
  // ps.on_worker_loss = "continue": worker `rank` is gone. Rounds it has not pushed to complete with
  // the other workers' inputs (what it pushed before counts, once); async updates are scaled to the
  // survivors.
  void worker_lost(int rank);
  // Async, at shutdown: every key's final store to the observer.
  void report_final_stores() const;
  std::string describe() const;

 private:
  void sync_push(Message message);
  void sync_pull(Message message);
  void async_push(Message message);
  void async_pull(Message message);
  // ValidatedRule: a worker's push sent on to its validator.
  void forward_for_judgement(Message message);
  // ValidatedRule, async: a validator's judged step for one worker's push (empty: rejected).
  void apply_judgement(Message message);

  KeyState& key_state(std::uint64_t key, std::uint64_t bytes);
  ComputeCost sum_cost(std::uint64_t bytes) const;
  void reply(const Message& request, Payload payload = {});
  // ValidatedRule: true if `message` is a validator's sum; otherwise refused and reported (tags).
  bool is_verdict(const Message& message);
  // True (and the run failed) when `message`'s payload is not the size the rule needs.
  bool wrong_size(const Message& message);
  // Every input of the round is applied: the aggregate to the observer, the parked pulls answered.
  void complete_round(std::uint64_t key, Round& round, std::uint32_t iteration);
  // The inputs a sync round waits for: the pushes the plan calls for, less those of workers lost
  // before they pushed to it.
  int expected_inputs(std::uint64_t key, const Round& round, std::uint32_t iteration) const;
  // Records the workers the round is applied without (lost before pushing, or late backups).
  void mark_absent(std::uint64_t key, Round& round, std::uint32_t iteration) const;
  // Completes the round if every expected input is applied (applying it first when the rule applies
  // whole rounds and no input's task did, as after a loss).
  void close_if_complete(std::uint64_t key, KeyState& state, Round& round, std::uint32_t iteration);
  // Counts an answered pull; frees the round once every live worker and validator has pulled it.
  void count_pull(const Message& request, Round& round, std::uint64_t key, std::uint32_t iteration);
  bool all_pulled(const Round& round) const;
  void answer_sync_pull(const Message& request, Round& round, std::uint64_t key, std::uint32_t iteration);
  // Applies a whole round on the key's lane, then completes it: when every participant dropped this
  // key's tensor (RoundPlan, on its first pull: zero updates), or when a loss completed the round.
  void apply_whole_round(std::uint64_t key, KeyState& state, Round& round, std::uint32_t iteration);
  // ps.max_staleness: true if `message` (an async push) is within the bound; refused ones are
  // acknowledged (a fused one answered like a pull) and never applied.
  bool admit_by_staleness(Message& message, KeyState& state);

  Runtime& rt_;
  const AggregatorOptions options_;
  RunObserver& observer_;
  const SyntheticWorkload& workload_;
  const UpdateRule& rule_;
  const bool sync_;
  const RoundPlan& plan_;     // train.participation / train.drop_rate: the pushes each sync round gets
  const HostGroups& groups_;  // ps.local_reduce: only each host's root pushes and pulls, for its host
  Executor& engine_;
  std::string name_;
  std::vector<std::uint64_t> lane_bytes_;
  std::map<std::uint64_t, KeyState> keys_;
  std::set<int> lost_;  // ps.on_worker_loss = "continue": worker ranks declared lost
  // ps.max_staleness: the key version each worker last pulled, by (key, worker rank).
  std::map<std::pair<std::uint64_t, int>, std::uint64_t> pulled_version_;
  // ValidatedRule, async: pushes not yet judged, by (worker, key, round), with the worker's pull once
  // it comes (answered after the validator's judgement is applied).
  std::map<std::tuple<int, std::uint64_t, std::uint32_t>, std::optional<Message>> awaiting_judgement_;
};

}  // namespace pstwin
