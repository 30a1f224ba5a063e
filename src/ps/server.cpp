#include "ps/server.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/codec.hpp"
#include "core/float_sum.hpp"
#include "ps/ids.hpp"

namespace pstwin {

Server::Server(NodeContext context, int rank, const SyntheticWorkload& workload,
               const TrainingModel* training)
    : PsNode(context, Role::kServer, rank),
      workload_(workload),
      training_(training),
      plan_(context.scenario, workload),
      engine_(context.runtime.executor("engine", context.scenario.ps.server_engine_threads)),
      lane_bytes_(static_cast<std::size_t>(context.scenario.ps.server_engine_threads), 0) {
  if (context.scenario.lb.balancing == Balancing::kLb)
    decisions_ = std::make_unique<DecisionBook>(workload.partitions(), context.scenario.roles.servers);
}

ComputeCost Server::sum_cost(std::uint64_t bytes) const {
  return {static_cast<double>(bytes) / scenario_.workload.sum_bandwidth_Bps, 0};
}

Server::KeyState& Server::key_state(std::uint64_t key, std::uint64_t bytes) {
  auto [it, inserted] = keys_.try_emplace(key);
  if (inserted) {
    // Least-loaded lane by bytes; ties go to the lowest lane index.
    auto lane = std::min_element(lane_bytes_.begin(), lane_bytes_.end()) - lane_bytes_.begin();
    it->second.lane = static_cast<int>(lane);
    lane_bytes_[static_cast<std::size_t>(lane)] += bytes;
    if (training_) {
      // Every node derives the same initial model, so the key starts from the workers' values.
      const auto& partition = workload_.partition(key);
      const auto initial = training_->initial_parameters().subspan(
          training_->tensor_offset(partition.tensor) + partition.offset / sizeof(float),
          partition.bytes / sizeof(float));
      auto& state = it->second;
      state.store = std::make_shared<ByteBuffer>(partition.bytes);
      state.store_bytes = partition.bytes;
      std::copy(initial.begin(), initial.end(), state.store->floats().begin());
      state.velocity.assign(initial.size(), 0.0f);
    }
  }
  return it->second;
}

void Server::apply_gradients(std::uint64_t key, KeyState& state,
                             std::span<const std::shared_ptr<Payload>> gradients, std::uint32_t iteration,
                             bool combine) const {
  std::vector<float> mean(state.velocity.size(), 0.0f);
  if (combine) {
    // By rank; a participant that dropped this tensor (RoundPlan) counts as a zero update.
    std::vector<std::span<const float>> spans;
    const std::vector<float> zeros(mean.size(), 0.0f);
    for (std::size_t w = 0; w < gradients.size(); ++w) {
      const auto& gradient = gradients[w];
      if (gradient && gradient->size() == mean.size() * sizeof(float))
        spans.push_back(gradient->floats());
      else if (!gradient && plan_.participates(static_cast<int>(w), iteration))
        spans.emplace_back(zeros);
    }
    training_->combine(key, spans, mean);
  } else {
    // Async pushes and validators' sums (already weighted) add up; async scales by 1 / workers.
    for (const auto& gradient : gradients)
      if (gradient->size() == mean.size() * sizeof(float)) sum_into(mean, gradient->floats());
    if (scenario_.ps.mode == TrainingMode::kAsync) {
      const auto workers = static_cast<float>(workload_.workers());
      for (auto& value : mean) value /= workers;
    }
  }
  training_->apply(state.store->floats(), mean, state.velocity, iteration);
}

void Server::apply_round(std::uint64_t key, KeyState& state, Round& round,
                         std::vector<std::shared_ptr<Payload>>& inputs, std::uint32_t iteration,
                         bool combine) const {
  apply_gradients(key, state, inputs, iteration, combine);
  inputs.clear();
  round.bytes = state.store->size();
  round.sum = std::make_shared<ByteBuffer>(state.store->bytes());
}

namespace {
bool carries_push(Command command) {
  return command == Command::kPush || command == Command::kPushPull;
}
}  // namespace

void Server::on_app_message(Message message) {
  if (message.header.command == Command::kLbDecision) {
    on_decision(message);
    return;
  }
  if (decisions_ && !message.header.is_response) {
    const auto iteration = message.header.iteration;
    if (carries_push(message.header.command))
      monitor_.received(iteration, message.header.sender, message.payload.size() + kHeaderBytes, rt_.now());
    const LbDecision* decision = decisions_->find(iteration);
    if (!decision) {
      held_[iteration].push_back(std::move(message));
      return;
    }
    if (!accept_routed(message, *decision)) return;
  }
  dispatch(std::move(message));
}

void Server::on_ready() {
  report_start_decisions(decisions_.get());
}

void Server::on_decision(const Message& message) {
  const LbDecision* decision = take_decision(decisions_.get(), message);
  if (!decision) return;
  auto held = held_.extract(decision->iteration);
  if (held.empty()) return;
  for (auto& request : held.mapped())
    if (accept_routed(request, *decision)) dispatch(std::move(request));
}

bool Server::accept_routed(const Message& message, const LbDecision& decision) {
  const auto& h = message.header;
  const auto index = workload_.index_of(h.key);
  observer_.request_routed(rt_.self(), h.sender, h.key, h.iteration);
  // The rank the scheduler assigned (rank_ is -1 for a real node that asked for none).
  const int rank = rank_of(rt_.self());
  if (decision.owner[index] != rank) {
    rt_.fail("server " + std::to_string(rank) + " got a " + std::string(command_name(h.command)) +
             " from node " + std::to_string(h.sender) + " for key " + std::to_string(h.key) + ", iteration " +
             std::to_string(h.iteration) + ", which decision " + std::to_string(decision.version) +
             " gives to server " + std::to_string(decision.owner[index]));
    return false;
  }
  if (!carries_push(h.command)) return true;
  const auto expected = decision.partitions_of(rank) * static_cast<std::uint64_t>(workload_.workers());
  if (++pushes_routed_[h.iteration] == expected) {
    pushes_routed_.erase(h.iteration);
    LbReport report = monitor_.take(h.iteration);
    const auto& missing = scenario_.lb.missing_measurements;
    if (std::find(missing.begin(), missing.end(), h.iteration) != missing.end())
      report = LbReport{h.iteration, 0, 0, {}};
    MessageHeader fields;
    send_to(kSchedulerId, Command::kLbReport, fields, encode_report(report));
    decisions_->forget_before(h.iteration);
  }
  return true;
}

void Server::dispatch(Message message) {
  const bool sync = scenario_.ps.mode == TrainingMode::kSync;
  if (message.header.is_response) {
    rt_.log("server: unexpected response from node " + std::to_string(message.header.sender));
    return;
  }
  if (message.header.command == Command::kPush && training_ && scenario_.roles.validators > 0) {
    validated_push(std::move(message));
  } else if (message.header.command == Command::kPush || message.header.command == Command::kPushPull) {
    sync ? sync_push(std::move(message)) : async_push(std::move(message));
  } else if (!sync && training_ && scenario_.roles.validators > 0) {
    auto it = awaiting_verdict_.find(
        std::make_tuple(rank_of(message.header.sender), message.header.key, message.header.iteration));
    if (it != awaiting_verdict_.end() && role_of(message.header.sender) == Role::kWorker)
      it->second = std::move(message);  // answered once the validator's decision is applied
    else
      async_pull(std::move(message));
  } else {
    sync ? sync_pull(std::move(message)) : async_pull(std::move(message));
  }
}

void Server::sync_push(Message message) {
  const auto key = message.header.key;
  const auto iteration = message.header.iteration;
  const int worker = rank_of(message.header.sender);
  auto& state = key_state(key, message.payload.size());
  Round& round = state.rounds[iteration];
  if (std::find(round.contributors.begin(), round.contributors.end(), worker) != round.contributors.end() ||
      round.complete) {
    observer_.duplicate_push(rt_.self(), worker, key, iteration);
    // A fused request's one reply is the aggregate, owed to the first push; a second would
    // leave the worker a reply it cannot place.
    if (message.header.command != Command::kPushPull) reply(message);
    return;
  }
  round.contributors.push_back(worker);
  auto payload = std::make_shared<Payload>(std::move(message.payload));
  const auto bytes = payload->size();
  if (training_ && payload->size() != workload_.partition(key).bytes) {
    rt_.fail("server " + std::to_string(rank_) + ": worker " + std::to_string(worker) + " pushed " +
             std::to_string(payload->size()) + " bytes for key " + std::to_string(key) + ", expected " +
             std::to_string(workload_.partition(key).bytes));
    return;
  }
  const int expected = plan_.pushers(iteration, workload_.partition(key).tensor);
  std::function<void()> work;
  if (training_) {
    round.gradients.resize(static_cast<std::size_t>(workload_.workers()));
    round.gradients.at(static_cast<std::size_t>(worker)) = payload;
    // The last push's task runs after every earlier one of this key (same lane, FIFO): it applies
    // the round, in rank order, and snapshots the parameters the round's pulls return.
    if (static_cast<int>(round.contributors.size()) == expected) {
      work = [this, &state, &round, key, iteration] {
        apply_round(key, state, round, round.gradients, iteration, true);
      };
    }
  } else {
    // The lane owns `round.sum` while summing: nothing else touches it until `done` runs.
    work = [&round, payload] {
      if (payload->is_phantom()) {
        round.phantom = true;
        round.bytes = payload->size();
        return;
      }
      if (!round.sum) {
        round.sum = std::make_shared<ByteBuffer>(payload->bytes());
        round.bytes = payload->size();
      } else if (round.sum->size() == payload->size()) {
        sum_into(round.sum->floats(), payload->floats());
      }
    };
  }
  message.payload = Payload{};
  auto done = [this, request = std::move(message), &round, key, iteration, worker, expected]() mutable {
    ++round.pushes_applied;
    observer_.push_applied(rt_.self(), worker, key, iteration);
    // A fused push_pull is answered like a pull: with the aggregate, once the round completes.
    if (request.header.command == Command::kPushPull)
      round.waiting_pulls.push_back(std::move(request));
    else
      reply(request);
    if (round.pushes_applied < expected) return;
    round.complete = true;
    observer_.aggregate_complete(rt_.self(), key, iteration,
                                 round.phantom ? Payload::phantom(round.bytes) : Payload::adopt(round.sum));
    auto waiting = std::move(round.waiting_pulls);
    for (const auto& pull : waiting) answer_sync_pull(pull, round, key, iteration);
  };
  engine_.submit(state.lane, "aggregate", sum_cost(bytes), std::move(work), std::move(done));
}

// ZenoPS: a worker's push goes to validator (worker rank % validators), tagged (round = iteration,
// worker = customer_id, tensor = key); a validator's push (app_id kVerdictApp) carries its weighted
// sum for one key and round. Sync: the round is applied once every validator's sum is in; async:
// each sum is applied on arrival.
void Server::validated_push(Message message) {
  const auto key = message.header.key;
  const auto iteration = message.header.iteration;
  const bool sync = scenario_.ps.mode == TrainingMode::kSync;
  const bool rejected =
      message.payload.empty() && role_of(message.header.sender) == Role::kValidator && !sync;
  if (message.payload.size() != workload_.partition(key).bytes && !rejected) {
    rt_.fail("server " + std::to_string(rank_) + ": node " + std::to_string(message.header.sender) +
             " pushed " + std::to_string(message.payload.size()) + " bytes for key " + std::to_string(key) +
             ", expected " + std::to_string(workload_.partition(key).bytes));
    return;
  }
  auto& state = key_state(key, message.payload.size());
  if (role_of(message.header.sender) == Role::kWorker) {
    const int worker = rank_of(message.header.sender);
    Round& round = state.rounds[iteration];
    if (std::find(round.contributors.begin(), round.contributors.end(), worker) != round.contributors.end()) {
      observer_.duplicate_push(rt_.self(), worker, key, iteration);
      reply(message);
      return;
    }
    round.contributors.push_back(worker);
    if (!sync && static_cast<int>(round.contributors.size()) == workload_.workers())
      state.rounds.erase(iteration);  // async keeps rounds only to refuse duplicates
    MessageHeader fields = message.header;
    fields.app_id = kCandidateApp;
    fields.customer_id = static_cast<std::uint16_t>(worker);
    const NodeId validator = validator_id(worker % scenario_.roles.validators);
    const int copies = scenario_.zeno.duplicate_candidates ? 2 : 1;
    for (int c = 0; c < copies; ++c) send_to(validator, Command::kPush, fields, message.payload);
    observer_.push_applied(rt_.self(), worker, key, iteration);
    message.payload = Payload{};
    // Async: the worker's pull of this key waits for the validator's decision, so workers go no
    // faster than their updates are judged (else they would finish while a backlog waits unjudged).
    if (!sync) awaiting_verdict_.try_emplace(std::make_tuple(worker, key, iteration));
    reply(message);
    return;
  }
  const int validator = rank_of(message.header.sender);
  if (role_of(message.header.sender) != Role::kValidator || message.header.app_id != kVerdictApp) {
    observer_.tag_checked(rt_.self(), false,
                          "server " + std::to_string(rank_) + " got a push from node " +
                              std::to_string(message.header.sender) +
                              " that is neither a worker's nor a "
                              "validator's sum");
    return;
  }
  auto payload = std::make_shared<Payload>(std::move(message.payload));
  message.payload = Payload{};
  if (!sync) {
    // Async: the validator's step for one worker's update (empty: rejected), then that push's ack.
    auto pending = awaiting_verdict_.extract(
        std::make_tuple(static_cast<int>(message.header.customer_id), key, iteration));
    observer_.tag_checked(
        rt_.self(), !pending.empty(),
        !pending.empty() ? std::string()
                         : "server " + std::to_string(rank_) + ": validator " + std::to_string(validator) +
                               " judged worker " + std::to_string(message.header.customer_id) + "'s key " +
                               std::to_string(key) + " of round " + std::to_string(iteration) +
                               ", which is not waiting (refused)");
    if (pending.empty()) return;
    std::function<void()> work;
    if (!payload->empty())
      work = [this, key, iteration, &state, payload] {
        apply_gradients(key, state, std::span(&payload, 1), iteration, false);
      };
    auto done = [this, pull = std::move(pending.mapped())]() mutable {
      if (pull) async_pull(std::move(*pull));
    };
    engine_.submit(state.lane, "aggregate", sum_cost(payload->size()), std::move(work), std::move(done));
    return;
  }
  Round& round = state.rounds[iteration];
  round.verdicts.resize(static_cast<std::size_t>(scenario_.roles.validators));
  const bool fresh = !round.complete && !round.verdicts.at(static_cast<std::size_t>(validator));
  observer_.tag_checked(rt_.self(), fresh,
                        "server " + std::to_string(rank_) + ": validator " + std::to_string(validator) +
                            " pushed key " + std::to_string(key) + " of round " + std::to_string(iteration) +
                            " twice (second refused)");
  if (!fresh) {
    reply(message);
    return;
  }
  round.verdicts[static_cast<std::size_t>(validator)] = payload;
  std::function<void()> work;
  if (++round.verdicts_in == scenario_.roles.validators) {
    work = [this, &state, &round, key, iteration] {
      apply_round(key, state, round, round.verdicts, iteration, false);
    };
  }
  auto done = [this, request = std::move(message), &round, key, iteration]() mutable {
    reply(request);
    // The last sum's task applied the round: only its `done` (FIFO on the lane) completes it.
    if (++round.verdicts_applied < scenario_.roles.validators) return;
    round.complete = true;
    observer_.aggregate_complete(rt_.self(), key, iteration, Payload::adopt(round.sum));
    auto waiting = std::move(round.waiting_pulls);
    for (const auto& pull : waiting) answer_sync_pull(pull, round, key, iteration);
  };
  engine_.submit(state.lane, "aggregate", sum_cost(payload->size()), std::move(work), std::move(done));
}

void Server::sync_pull(Message message) {
  const auto key = message.header.key;
  const auto iteration = message.header.iteration;
  auto& state = key_state(key, workload_.partition(key).bytes);
  Round& round = state.rounds[iteration];
  if (!round.complete) {
    round.waiting_pulls.push_back(std::move(message));
    if (training_ && scenario_.roles.validators == 0 && !round.applying &&
        plan_.pushers(iteration, workload_.partition(key).tensor) == 0)
      apply_unpushed_round(key, state, round, iteration);
    return;
  }
  answer_sync_pull(message, round, key, iteration);
}

void Server::apply_unpushed_round(std::uint64_t key, KeyState& state, Round& round, std::uint32_t iteration) {
  round.applying = true;
  round.gradients.resize(static_cast<std::size_t>(workload_.workers()));
  auto work = [this, &state, &round, key, iteration] {
    apply_round(key, state, round, round.gradients, iteration, true);
  };
  auto done = [this, &round, key, iteration] {
    round.complete = true;
    observer_.aggregate_complete(rt_.self(), key, iteration, Payload::adopt(round.sum));
    auto waiting = std::move(round.waiting_pulls);
    for (const auto& pull : waiting) answer_sync_pull(pull, round, key, iteration);
  };
  engine_.submit(state.lane, "aggregate", sum_cost(state.store_bytes), std::move(work), std::move(done));
}

void Server::answer_sync_pull(const Message& request, Round& round, std::uint64_t key,
                              std::uint32_t iteration) {
  // Zero-copy: every pull of a finished round shares the one aggregate buffer.
  reply(request, round.phantom ? Payload::phantom(round.bytes) : Payload::adopt(round.sum));
  if (++round.pulls_answered == workload_.workers() + scenario_.roles.validators)
    keys_[key].rounds.erase(iteration);
}

void Server::async_push(Message message) {
  const auto key = message.header.key;
  const auto iteration = message.header.iteration;
  const int worker = rank_of(message.header.sender);
  auto& state = key_state(key, message.payload.size());
  auto payload = std::make_shared<Payload>(std::move(message.payload));
  const auto bytes = payload->size();
  std::function<void()> work = [&state, payload] {
    state.store_bytes = payload->size();
    if (payload->is_phantom()) return;
    if (!state.store) {
      state.store = std::make_shared<ByteBuffer>(payload->bytes());
    } else if (state.store->size() == payload->size()) {
      sum_into(state.store->floats(), payload->floats());
    }
  };
  if (training_) {
    if (payload->size() != state.store_bytes) {
      rt_.fail("server " + std::to_string(rank_) + ": worker " + std::to_string(worker) + " pushed " +
               std::to_string(payload->size()) + " bytes for key " + std::to_string(key) + ", expected " +
               std::to_string(state.store_bytes));
      return;
    }
    work = [this, key, iteration, &state, payload] {
      apply_gradients(key, state, std::span(&payload, 1), iteration, false);
    };
  }
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
  const double snapshot_s = snapshot ? static_cast<double>(bytes) / scenario_.staging.copy_bandwidth_Bps : 0;
  engine_.submit(state.lane, "aggregate", {sum_cost(bytes).seconds + snapshot_s, 0}, std::move(work),
                 std::move(done));
}

// A key's version counts the pushes admitted to it; the lane applies them and takes pull snapshots
// in arrival order, so a pull returns exactly the versions admitted before it arrived.
bool Server::admit_by_staleness(Message& message, KeyState& state) {
  const int bound = scenario_.ps.max_staleness;
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

void Server::async_pull(Message message) {
  const auto key = message.header.key;
  const auto bytes = workload_.partition(key).bytes;
  auto& state = key_state(key, bytes);
  if (scenario_.ps.max_staleness > 0 && role_of(message.header.sender) == Role::kWorker)
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
  engine_.submit(state.lane, "snapshot",
                 {static_cast<double>(bytes) / scenario_.staging.copy_bandwidth_Bps, 0}, std::move(work),
                 std::move(done));
}

void Server::on_shutdown() {
  if (scenario_.ps.mode != TrainingMode::kAsync) return;
  for (const auto& [key, state] : keys_)
    observer_.final_store(rt_.self(), key,
                          state.store ? Payload::adopt(state.store) : Payload::phantom(state.store_bytes));
}

std::string Server::describe_app_state() const {
  std::ostringstream out;
  int open_rounds = 0;
  for (const auto& [key, state] : keys_) {
    for (const auto& [iteration, round] : state.rounds) {
      if (open_rounds++ < 3)
        out << " key " << key << " it " << iteration << ": " << round.pushes_applied << "/"
            << workload_.workers() << " pushes, " << round.waiting_pulls.size() << " pulls waiting;";
    }
  }
  return "serving " + std::to_string(keys_.size()) + " keys, " + std::to_string(open_rounds) +
         " open rounds" + (open_rounds ? ":" + out.str() : "");
}

}  // namespace pstwin
