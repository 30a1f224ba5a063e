#include "ps/server.hpp"

#include <algorithm>
#include <sstream>

#include "core/codec.hpp"
#include "ps/ids.hpp"

namespace pstwin {

Server::Server(NodeContext context, int rank, const SyntheticWorkload& workload,
               const TrainingModel* training)
    : PsNode(context, Role::kServer, rank),
      workload_(workload),
      training_(training),
      aggregator_(context.runtime, context.scenario, context.observer, workload, training,
                  context.runtime.executor("engine", context.scenario.ps.server_engine_threads),
                  "server " + std::to_string(rank)) {
  if (context.scenario.lb.balancing == Balancing::kLb) {
    decisions_ = std::make_unique<DecisionBook>(
        workload.partitions(), context.scenario.roles.servers,
        context.scenario.lb.worker_aggregators ? context.scenario.roles.workers : 0);
    intake_ = std::make_unique<RangeIntake>(rt_, scenario_, observer_, workload, *decisions_, monitor_, true);
  }
}

void Server::on_app_message(Message message) {
  if (message.header.command == Command::kLbDecision) {
    on_decision(message);
    return;
  }
  if (intake_ && !message.header.is_response) {
    auto admitted = intake_->admit(std::move(message));
    if (admitted) dispatch(std::move(*admitted));
    return;
  }
  dispatch(std::move(message));
}

void Server::on_ready() {
  report_start_decisions(decisions_.get());
}

void Server::on_decision(const Message& message) {
  const LbDecision* decision = take_decision(decisions_.get(), message);
  if (!decision) return;
  for (auto& request : intake_->release(*decision)) dispatch(std::move(request));
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
    sync ? aggregator_.sync_push(std::move(message)) : aggregator_.async_push(std::move(message));
  } else if (!sync && training_ && scenario_.roles.validators > 0) {
    auto it = awaiting_verdict_.find(
        std::make_tuple(rank_of(message.header.sender), message.header.key, message.header.iteration));
    if (it != awaiting_verdict_.end() && role_of(message.header.sender) == Role::kWorker)
      it->second = std::move(message);  // answered once the validator's decision is applied
    else
      aggregator_.async_pull(std::move(message));
  } else {
    sync ? aggregator_.sync_pull(std::move(message)) : aggregator_.async_pull(std::move(message));
  }
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
  auto& state = aggregator_.key_state(key, message.payload.size());
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
        aggregator_.apply_gradients(key, state, std::span(&payload, 1), iteration, false);
      };
    auto done = [this, pull = std::move(pending.mapped())]() mutable {
      if (pull) aggregator_.async_pull(std::move(*pull));
    };
    aggregator_.engine().submit(state.lane, "aggregate", aggregator_.sum_cost(payload->size()),
                                std::move(work), std::move(done));
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
      aggregator_.apply_round(key, state, round, round.verdicts, iteration, false);
    };
  }
  auto done = [this, request = std::move(message), &round, key, iteration]() mutable {
    reply(request);
    // The last sum's task applied the round: only its `done` (FIFO on the lane) completes it.
    if (++round.verdicts_applied < scenario_.roles.validators) return;
    round.complete = true;
    observer_.aggregate_complete(rt_.self(), key, iteration, Payload::adopt(round.sum));
    auto waiting = std::move(round.waiting_pulls);
    for (const auto& pull : waiting) aggregator_.answer_sync_pull(pull, round, key, iteration);
  };
  aggregator_.engine().submit(state.lane, "aggregate", aggregator_.sum_cost(payload->size()), std::move(work),
                              std::move(done));
}

void Server::on_shutdown() {
  if (scenario_.ps.mode == TrainingMode::kAsync) aggregator_.report_final_stores();
}

std::string Server::describe_app_state() const {
  return aggregator_.describe() + (intake_ && intake_->held() ? "; " + std::to_string(intake_->held()) +
                                                                    " requests wait for their decision"
                                                              : "");
}

}  // namespace pstwin
