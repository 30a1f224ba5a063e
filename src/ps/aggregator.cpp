#include "ps/aggregator.hpp"

#include <algorithm>
#include <sstream>

#include "core/assert.hpp"
#include "ps/ids.hpp"
#include "ps/ps_node.hpp"

namespace pstwin {

Aggregator::Aggregator(Runtime& runtime, AggregatorOptions options, RunObserver& observer,
                       const JobShape& job, const UpdateRule& rule, Executor& engine, std::string name)
    : rt_(runtime),
      options_(std::move(options)),
      observer_(observer),
      workload_(job.workload),
      rule_(rule),
      sync_(options_.sync),
      plan_(job.plan),
      groups_(job.groups),
      engine_(engine),
      name_(std::move(name)),
      lane_bytes_(static_cast<std::size_t>(engine.lanes()), 0) {}

void Aggregator::handle(Message request) {
  const auto command = request.header.command;
  const Role sender = role_of(request.header.sender);
  if (sender == Role::kWorker && lost_.contains(rank_of(request.header.sender))) {
    // Declared dead, its rounds were resolved without it: a late message must not count now.
    rt_.log(name_ + ": ignoring " + std::string(command_name(command)) + " from worker " +
            std::to_string(rank_of(request.header.sender)) + ", declared lost");
    return;
  }
  if (sender == Role::kWorker && groups_.active() && !groups_.is_root(rank_of(request.header.sender))) {
    // ps.local_reduce: the host's root pushes and pulls for it; another's request would count twice.
    rt_.log(name_ + ": ignoring " + std::string(command_name(command)) + " from worker " +
            std::to_string(rank_of(request.header.sender)) +
            ", which is no host's root: with ps.local_reduce the root pushes and pulls for its host");
    return;
  }
  if (command == Command::kPush && rule_.forwards_worker_pushes()) {
    if (sender == Role::kWorker)
      forward_for_judgement(std::move(request));
    else if (sync_)
      sync_push(std::move(request));
    else
      apply_judgement(std::move(request));
  } else if (command == Command::kPush || command == Command::kPushPull) {
    sync_ ? sync_push(std::move(request)) : async_push(std::move(request));
  } else if (sync_) {
    sync_pull(std::move(request));
  } else {
    if (rule_.forwards_worker_pushes() && sender == Role::kWorker) {
      auto it = awaiting_judgement_.find(
          std::make_tuple(rank_of(request.header.sender), request.header.key, request.header.iteration));
      if (it != awaiting_judgement_.end()) {
        it->second = std::move(request);  // answered once the validator's judgement is applied
        return;
      }
    }
    async_pull(std::move(request));
  }
}

void Aggregator::reply(const Message& request, Payload payload) {
  rt_.send(reply_message(request, std::move(payload)));
}

ComputeCost Aggregator::sum_cost(std::uint64_t bytes) const {
  return {static_cast<double>(bytes) / options_.sum_bandwidth_Bps, 0};
}

KeyState& Aggregator::key_state(std::uint64_t key, std::uint64_t bytes) {
  auto [it, inserted] = keys_.try_emplace(key);
  if (inserted) {
    // Least-loaded lane by bytes; ties go to the lowest lane index.
    auto lane = std::min_element(lane_bytes_.begin(), lane_bytes_.end()) - lane_bytes_.begin();
    it->second.lane = static_cast<int>(lane);
    it->second.lost_workers = static_cast<int>(lost_.size());
    lane_bytes_[static_cast<std::size_t>(lane)] += bytes;
    rule_.init_key(key, it->second);
  }
  return it->second;
}

bool Aggregator::is_verdict(const Message& message) {
  if (role_of(message.header.sender) == Role::kValidator && message.header.app_id == kVerdictApp) return true;
  observer_.tag_checked(rt_.self(), false,
                        name_ + " got a push from node " + std::to_string(message.header.sender) +
                            " that is neither a worker's nor a validator's sum");
  return false;
}

bool Aggregator::wrong_size(const Message& message) {
  const auto expected = rule_.input_bytes(message.header.key);
  if (expected == 0 || message.payload.size() == expected) return false;
  const NodeId sender = message.header.sender;
  rt_.fail(name_ + ": " + std::string(role_name(role_of(sender))) + " " + std::to_string(rank_of(sender)) +
           " pushed " + std::to_string(message.payload.size()) + " bytes for key " +
           std::to_string(message.header.key) + ", expected " + std::to_string(expected));
  return true;
}

void Aggregator::sync_push(Message message) {
  const auto key = message.header.key;
  const auto iteration = message.header.iteration;
  const NodeId sender = message.header.sender;
  const int rank = rank_of(sender);
  const bool from_validator = rule_.input_role() == Role::kValidator;
  if (from_validator && (!is_verdict(message) || wrong_size(message))) return;
  auto& state = key_state(key, message.payload.size());
  Round& round = state.rounds[iteration];
  const bool repeated = round.complete || std::find(round.contributors.begin(), round.contributors.end(),
                                                    rank) != round.contributors.end();
  if (from_validator) {
    observer_.tag_checked(rt_.self(), !repeated,
                          name_ + ": validator " + std::to_string(rank) + " pushed key " +
                              std::to_string(key) + " of round " + std::to_string(iteration) +
                              " twice (second refused)");
    if (repeated) {
      reply(message);
      return;
    }
  } else if (options_.backup_workers > 0 &&
             std::ranges::find(round.contributors, rank) == round.contributors.end() &&
             (round.complete ||
              static_cast<int>(round.contributors.size()) >= expected_inputs(key, round, iteration))) {
    // A backup worker's push after the round has the pushes it completes with: not applied, answered
    // as usual (a fused one with the aggregate, once there is one).
    if (std::ranges::find(round.late, rank) != round.late.end()) {
      observer_.duplicate_push(rt_.self(), rank, key, iteration);
      if (message.header.command != Command::kPushPull) reply(message);  // a fused one was answered once
      return;
    } else {
      round.late.push_back(rank);
      observer_.late_push(rt_.self(), rank, key, iteration);
    }
    if (message.header.command != Command::kPushPull)
      reply(message);
    else if (round.complete)
      answer_sync_pull(message, round, key, iteration);
    else
      round.waiting_pulls.push_back(std::move(message));
    return;
  } else if (repeated) {
    observer_.duplicate_push(rt_.self(), rank, key, iteration);
    // A fused request's one reply is the aggregate, owed to the first push; a second would leave the
    // worker a reply it cannot place.
    if (message.header.command != Command::kPushPull) reply(message);
    return;
  }
  round.contributors.push_back(rank);
  if (!from_validator && wrong_size(message)) return;
  auto input = std::make_shared<Payload>(std::move(message.payload));
  const auto bytes = input->size();
  const int expected = expected_inputs(key, round, iteration);
  std::function<void()> work;
  if (rule_.folds_each_input()) {
    // The lane owns `round.sum` while folding: nothing else touches it until `done` runs.
    work = [this, &round, input] { rule_.fold(round, input); };
  } else {
    round.inputs.resize(static_cast<std::size_t>(from_validator ? options_.validators : workload_.workers()));
    round.inputs.at(static_cast<std::size_t>(rank)) = input;
    // The last input's task runs after every earlier one of this key (same lane, FIFO): it applies the
    // round and snapshots the aggregate the round's pulls return.
    if (static_cast<int>(round.contributors.size()) == expected) {
      round.applying = true;
      mark_absent(key, round, iteration);
      work = [this, &state, &round, key, iteration] { rule_.apply_round(key, state, round, iteration); };
    }
  }
  message.payload = Payload{};
  auto done = [this, request = std::move(message), &state, &round, key, iteration, rank,
               from_validator]() mutable {
    PSTWIN_ASSERT(!round.complete, name_ + ": an input applied to a completed round");
    ++round.inputs_applied;
    if (from_validator) {
      reply(request);
    } else {
      for (const int worker : groups_.members(rank))
        observer_.push_applied(rt_.self(), worker, key, iteration);
      // A fused push_pull is answered like a pull: with the aggregate, once the round completes.
      if (request.header.command == Command::kPushPull)
        round.waiting_pulls.push_back(std::move(request));
      else
        reply(request);
    }
    close_if_complete(key, state, round, iteration);
  };
  engine_.submit_tagged(state.lane, "aggregate", sum_cost(bytes), std::move(work), std::move(done),
                        SpanTags{key, iteration, from_validator ? -1 : rank, {}, bytes});
}

int Aggregator::expected_inputs(std::uint64_t key, const Round& round, std::uint32_t iteration) const {
  if (rule_.input_role() == Role::kValidator) return options_.validators;
  const int tensor = workload_.partition(key).tensor;
  int expected = groups_.active() ? groups_.pushers() : plan_.pushers(iteration, tensor);
  for (int lost : lost_)
    if (plan_.pushes(lost, iteration, tensor) &&
        std::ranges::find(round.contributors, lost) == round.contributors.end())
      --expected;
  // ps.backup_workers: the first pushes complete the round, at least one.
  return std::max(std::min(expected, 1), expected - options_.backup_workers);
}

void Aggregator::mark_absent(std::uint64_t key, Round& round, std::uint32_t iteration) const {
  const int tensor = workload_.partition(key).tensor;
  for (const int w : groups_.roots())
    if (plan_.pushes(w, iteration, tensor) &&
        std::ranges::find(round.contributors, w) == round.contributors.end())
      round.absent.push_back(w);
}

void Aggregator::close_if_complete(std::uint64_t key, KeyState& state, Round& round,
                                   std::uint32_t iteration) {
  if (round.complete || round.applied_whole ||
      round.inputs_applied < static_cast<int>(round.contributors.size()) ||
      round.inputs_applied < expected_inputs(key, round, iteration))
    return;
  if (rule_.folds_each_input() || round.applying) {
    if (round.inputs_applied > 0 || round.applying) complete_round(key, round, iteration);
    return;
  }
  apply_whole_round(key, state, round, iteration);
}

void Aggregator::worker_lost(int rank) {
  if (!lost_.insert(rank).second) return;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> open;
  for (auto& [key, state] : keys_) {
    state.lost_workers = static_cast<int>(lost_.size());
    for (auto& [iteration, round] : state.rounds) {
      if (!round.pulled_by.empty() && round.pulled_by.at(static_cast<std::size_t>(rank)))
        --round.pulls_answered;
      open.emplace_back(key, iteration);
    }
  }
  // Completing a round answers its pulls, which may free it: look each one up again.
  for (const auto& [key, iteration] : open) {
    auto& state = keys_.at(key);
    auto round = state.rounds.find(iteration);
    if (round == state.rounds.end()) continue;
    if (sync_) close_if_complete(key, state, round->second, iteration);
    round = state.rounds.find(iteration);
    if (round != state.rounds.end() && round->second.complete && all_pulled(round->second))
      state.rounds.erase(round);
  }
}

bool Aggregator::all_pulled(const Round& round) const {
  return round.pulls_answered == groups_.pushers() - static_cast<int>(lost_.size()) + options_.validators;
}

void Aggregator::count_pull(const Message& request, Round& round, std::uint64_t key,
                            std::uint32_t iteration) {
  if (const NodeId sender = request.header.sender; role_of(sender) == Role::kWorker) {
    const int rank = rank_of(sender);
    if (lost_.contains(rank)) return;  // answered, but freeing the round waits for the live ones
    if (options_.continues_on_worker_loss) {
      round.pulled_by.resize(static_cast<std::size_t>(workload_.workers()));
      round.pulled_by.at(static_cast<std::size_t>(rank)) = true;
    }
  }
  ++round.pulls_answered;
  if (all_pulled(round)) keys_[key].rounds.erase(iteration);
}

void Aggregator::complete_round(std::uint64_t key, Round& round, std::uint32_t iteration) {
  PSTWIN_ASSERT(!round.complete, name_ + ": key " + std::to_string(key) + " round " +
                                     std::to_string(iteration) + " completed twice");
  round.complete = true;
  for (const auto& judgement : round.judgements) observer_.rule_judged(rt_.self(), key, iteration, judgement);
  observer_.aggregate_complete(rt_.self(), key, iteration,
                               round.phantom ? Payload::phantom(round.bytes) : Payload::adopt(round.sum));
  auto waiting = std::move(round.waiting_pulls);
  for (const auto& pull : waiting) answer_sync_pull(pull, round, key, iteration);
}

void Aggregator::sync_pull(Message message) {
  const auto key = message.header.key;
  const auto iteration = message.header.iteration;
  auto& state = key_state(key, workload_.partition(key).bytes);
  Round& round = state.rounds[iteration];
  if (!round.complete) {
    round.waiting_pulls.push_back(std::move(message));
    if (!rule_.folds_each_input() && rule_.input_role() == Role::kWorker && !round.applying &&
        plan_.pushers(iteration, workload_.partition(key).tensor) == 0)
      apply_whole_round(key, state, round, iteration);
    return;
  }
  answer_sync_pull(message, round, key, iteration);
}

void Aggregator::apply_whole_round(std::uint64_t key, KeyState& state, Round& round,
                                   std::uint32_t iteration) {
  round.applying = true;
  round.applied_whole = true;
  mark_absent(key, round, iteration);
  round.inputs.resize(static_cast<std::size_t>(workload_.workers()));
  auto work = [this, &state, &round, key, iteration] { rule_.apply_round(key, state, round, iteration); };
  auto done = [this, &round, key, iteration] { complete_round(key, round, iteration); };
  engine_.submit_tagged(state.lane, "aggregate", sum_cost(state.store_bytes), std::move(work),
                        std::move(done), SpanTags{key, iteration, -1, {}, state.store_bytes});
}

void Aggregator::answer_sync_pull(const Message& request, Round& round, std::uint64_t key,
                                  std::uint32_t iteration) {
  // Zero-copy: every pull of a finished round shares the one aggregate buffer.
  reply(request, round.phantom ? Payload::phantom(round.bytes) : Payload::adopt(round.sum));
  count_pull(request, round, key, iteration);
}

// ZenoPS: a worker's push goes to validator (worker rank % validators), tagged (round = iteration,
// worker = customer_id, tensor = key); the validators' sums come back as this key's inputs.
void Aggregator::forward_for_judgement(Message message) {
  const auto key = message.header.key;
  const auto iteration = message.header.iteration;
  const int worker = rank_of(message.header.sender);
  if (wrong_size(message)) return;
  auto& state = key_state(key, message.payload.size());
  Round& round = state.rounds[iteration];
  if (std::find(round.forwarded.begin(), round.forwarded.end(), worker) != round.forwarded.end()) {
    observer_.duplicate_push(rt_.self(), worker, key, iteration);
    reply(message);
    return;
  }
  round.forwarded.push_back(worker);
  if (!sync_ && static_cast<int>(round.forwarded.size()) == workload_.workers())
    state.rounds.erase(iteration);  // async keeps rounds only to refuse duplicates
  Message candidate{message.header, Payload{}};
  candidate.header.app_id = kCandidateApp;
  candidate.header.customer_id = static_cast<std::uint16_t>(worker);
  candidate.header.recipient = validator_id(worker % options_.validators);
  candidate.header.command = Command::kPush;
  const int copies = options_.duplicate_candidates ? 2 : 1;
  for (int c = 0; c < copies; ++c) {
    Message copy{candidate.header, message.payload};
    rt_.send(std::move(copy));
  }
  observer_.push_applied(rt_.self(), worker, key, iteration);
  message.payload = Payload{};
  // Async: the worker's pull of this key waits for the validator's decision, so workers go no faster
  // than their updates are judged (else they would finish while a backlog waits unjudged).
  if (!sync_) awaiting_judgement_.try_emplace(std::make_tuple(worker, key, iteration));
  reply(message);
}

void Aggregator::apply_judgement(Message message) {
  const auto key = message.header.key;
  const auto iteration = message.header.iteration;
  const int validator = rank_of(message.header.sender);
  if (!is_verdict(message)) return;
  const bool rejected = message.payload.empty();
  if (!rejected && wrong_size(message)) return;
  auto& state = key_state(key, message.payload.size());
  auto pending = awaiting_judgement_.extract(
      std::make_tuple(static_cast<int>(message.header.customer_id), key, iteration));
  observer_.tag_checked(
      rt_.self(), !pending.empty(),
      !pending.empty() ? std::string()
                       : name_ + ": validator " + std::to_string(validator) + " judged worker " +
                             std::to_string(message.header.customer_id) + "'s key " + std::to_string(key) +
                             " of round " + std::to_string(iteration) + ", which is not waiting (refused)");
  if (pending.empty()) return;
  auto step = std::make_shared<Payload>(std::move(message.payload));
  std::function<void()> work;
  if (!step->empty())
    work = [this, key, iteration, &state, step] { rule_.apply_async(key, state, step, iteration); };
  auto done = [this, pull = std::move(pending.mapped())]() mutable {
    if (pull) async_pull(std::move(*pull));
  };
  const auto step_bytes = step->size();
  engine_.submit_tagged(state.lane, "aggregate", sum_cost(step_bytes), std::move(work), std::move(done),
                        SpanTags{key, iteration, -1, {}, step_bytes});
}

void Aggregator::async_push(Message message) {
  const auto key = message.header.key;
  const auto iteration = message.header.iteration;
  const int worker = rank_of(message.header.sender);
  if (wrong_size(message)) return;
  auto& state = key_state(key, message.payload.size());
  auto input = std::make_shared<Payload>(std::move(message.payload));
  const auto bytes = input->size();
  std::function<void()> work = [this, key, iteration, &state, input] {
    rule_.apply_async(key, state, input, iteration);
  };
  if (!admit_by_staleness(message, state)) return;
  message.payload = Payload{};
  // Fused push_pull: the reply carries the store as this push left it, snapshotted on the lane.
  std::shared_ptr<Payload> snapshot;
  if (message.header.command == Command::kPushPull) {
    snapshot = std::make_shared<Payload>();
    work = [apply = std::move(work), &state, snapshot] {
      apply();
      *snapshot = state.store ? Payload::copy_of(state.store->bytes()) : Payload::phantom(state.store_bytes);
    };
  }
  auto done = [this, request = std::move(message), key, iteration, worker, snapshot] {
    observer_.push_applied(rt_.self(), worker, key, iteration);
    reply(request, snapshot ? std::move(*snapshot) : Payload{});
  };
  const double snapshot_s = snapshot ? static_cast<double>(bytes) / options_.copy_bandwidth_Bps : 0;
  engine_.submit_tagged(state.lane, "aggregate", {sum_cost(bytes).seconds + snapshot_s, 0}, std::move(work),
                        std::move(done), SpanTags{key, iteration, worker, {}, bytes});
}

// A key's version counts the pushes admitted to it; the lane applies them and takes pull snapshots
// in arrival order, so a pull returns exactly the versions admitted before it arrived.
bool Aggregator::admit_by_staleness(Message& message, KeyState& state) {
  const int bound = options_.max_staleness;
  if (bound == 0) return true;
  const auto key = message.header.key;
  const int worker = rank_of(message.header.sender);
  const auto last = pulled_version_.find({key, worker});
  const std::uint64_t staleness = state.version - (last == pulled_version_.end() ? 0 : last->second);
  const bool admitted = staleness <= static_cast<std::uint64_t>(bound);
  observer_.push_staleness(rt_.self(), worker, key, message.header.iteration, staleness, admitted);
  if (admitted) {
    ++state.version;
    if (message.header.command == Command::kPushPull) pulled_version_[{key, worker}] = state.version;
    return true;
  }
  message.payload = Payload{};
  if (message.header.command == Command::kPushPull)
    async_pull(std::move(message));  // its reply is the current store, like a pull's
  else
    reply(message);
  return false;
}

void Aggregator::async_pull(Message message) {
  const auto key = message.header.key;
  const auto bytes = workload_.partition(key).bytes;
  auto& state = key_state(key, bytes);
  if (options_.max_staleness > 0 && role_of(message.header.sender) == Role::kWorker)
    pulled_version_[{key, rank_of(message.header.sender)}] = state.version;
  // Later pushes keep changing the store, so a pull takes a snapshot on the key's lane.
  auto snapshot = std::make_shared<Payload>();
  auto work = [&state, snapshot, bytes] {
    if (!state.store) {
      *snapshot = Payload::phantom(bytes);
      return;
    }
    *snapshot = Payload::copy_of(state.store->bytes());
  };
  auto done = [this, request = std::move(message), snapshot] { reply(request, *snapshot); };
  engine_.submit(state.lane, "snapshot", {static_cast<double>(bytes) / options_.copy_bandwidth_Bps, 0},
                 std::move(work), std::move(done));
}

void Aggregator::report_final_stores() const {
  for (const auto& [key, state] : keys_)
    observer_.final_store(rt_.self(), key,
                          state.store ? Payload::adopt(state.store) : Payload::phantom(state.store_bytes));
}

std::string Aggregator::describe() const {
  // Streams only: GCC 12 at -O3 reports a false -Wrestrict in a chain of std::string operator+ here.
  std::ostringstream rounds;
  int open_rounds = 0;
  for (const auto& [key, state] : keys_) {
    for (const auto& [iteration, round] : state.rounds) {
      if (open_rounds++ >= 3) continue;
      rounds << " key " << key << " it " << iteration << ": " << round.inputs_applied << "/"
             << workload_.workers() << " pushes, " << round.waiting_pulls.size() << " pulls waiting;";
    }
  }
  std::ostringstream out;
  out << "serving " << keys_.size() << " keys, " << open_rounds << " open rounds";
  if (open_rounds > 0) out << ":" << rounds.str();
  return out.str();
}

}  // namespace pstwin
