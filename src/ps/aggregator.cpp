#include "ps/aggregator.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/float_sum.hpp"
#include "ps/ids.hpp"
#include "ps/ps_node.hpp"

namespace pstwin {

Aggregator::Aggregator(Runtime& runtime, const Scenario& scenario, RunObserver& observer,
                       const SyntheticWorkload& workload, const TrainingModel* training, Executor& engine,
                       std::string name)
    : rt_(runtime),
      scenario_(scenario),
      observer_(observer),
      workload_(workload),
      training_(training),
      plan_(scenario, workload),
      engine_(engine),
      name_(std::move(name)),
      lane_bytes_(static_cast<std::size_t>(engine.lanes()), 0) {}

void Aggregator::reply(const Message& request, Payload payload) {
  rt_.send(reply_message(request, std::move(payload)));
}

ComputeCost Aggregator::sum_cost(std::uint64_t bytes) const {
  return {static_cast<double>(bytes) / scenario_.workload.sum_bandwidth_Bps, 0};
}

Aggregator::KeyState& Aggregator::key_state(std::uint64_t key, std::uint64_t bytes) {
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

void Aggregator::apply_gradients(std::uint64_t key, KeyState& state,
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

void Aggregator::apply_round(std::uint64_t key, KeyState& state, Round& round,
                             std::vector<std::shared_ptr<Payload>>& inputs, std::uint32_t iteration,
                             bool combine) const {
  apply_gradients(key, state, inputs, iteration, combine);
  inputs.clear();
  round.bytes = state.store->size();
  round.sum = std::make_shared<ByteBuffer>(state.store->bytes());
}

void Aggregator::sync_push(Message message) {
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
    rt_.fail(name_ + ": worker " + std::to_string(worker) + " pushed " + std::to_string(payload->size()) +
             " bytes for key " + std::to_string(key) + ", expected " +
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
        // COPY_FIRST without the copy when the received buffer is ours alone (a 1 MB memmove was
        // 4 % of a loopback bench's cycles).
        round.bytes = payload->size();
        round.sum = payload->take_sole_buffer();
        if (!round.sum) round.sum = std::make_shared<ByteBuffer>(payload->bytes());
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

void Aggregator::sync_pull(Message message) {
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

void Aggregator::apply_unpushed_round(std::uint64_t key, KeyState& state, Round& round,
                                      std::uint32_t iteration) {
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

void Aggregator::answer_sync_pull(const Message& request, Round& round, std::uint64_t key,
                                  std::uint32_t iteration) {
  // Zero-copy: every pull of a finished round shares the one aggregate buffer.
  reply(request, round.phantom ? Payload::phantom(round.bytes) : Payload::adopt(round.sum));
  if (++round.pulls_answered == workload_.workers() + scenario_.roles.validators)
    keys_[key].rounds.erase(iteration);
}

void Aggregator::async_push(Message message) {
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
      rt_.fail(name_ + ": worker " + std::to_string(worker) + " pushed " + std::to_string(payload->size()) +
               " bytes for key " + std::to_string(key) + ", expected " + std::to_string(state.store_bytes));
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
bool Aggregator::admit_by_staleness(Message& message, KeyState& state) {
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

void Aggregator::async_pull(Message message) {
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

void Aggregator::report_final_stores() const {
  for (const auto& [key, state] : keys_)
    observer_.final_store(rt_.self(), key,
                          state.store ? Payload::adopt(state.store) : Payload::phantom(state.store_bytes));
}

std::string Aggregator::describe() const {
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
