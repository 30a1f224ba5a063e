#include "zeno/validator.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "ps/ids.hpp"
#include "zeno/mlp_loss.hpp"

namespace pstwin::zeno {
namespace {

bool uses_reference(RuleKind kind) {
  return kind == RuleKind::kZenoPs || kind == RuleKind::kZenoPlusPlus || kind == RuleKind::kValidationOnly;
}

}  // namespace

Validator::Validator(NodeContext context, int rank, ValidatorOptions options, const JobShape& job,
                     const train::MlpTraining& training, const RuleConfig& rule)
    : PsNode(context, Role::kValidator, rank),
      options_(std::move(options)),
      workload_(job.workload),
      training_(training),
      rule_(rule),
      plan_(job.plan),
      compute_stage_(context.runtime.executor("compute", 1)),
      reference_momentum_(training.worker_momentum()) {
  const int validators = options_.validators;
  for (int w = rank; w < options_.workers; w += validators) workers_.push_back(w);
  held_out_ = training_.shards().validators.at(static_cast<std::size_t>(rank));
  trainer_ =
      training_.trainer(held_out_, static_cast<std::size_t>(options_.batch),
                        RandomStream(options_.seed, "zeno.validator", static_cast<std::uint64_t>(rank)));
  const auto initial = training_.initial_parameters();
  params_.assign(initial.begin(), initial.end());
}

void Validator::on_ready() {}

std::size_t Validator::element_offset(const PartitionSpec& partition) const {
  return training_.tensor_offset(partition.tensor) + partition.offset / sizeof(float);
}

void Validator::on_app_message(Message message) {
  const auto& h = message.header;
  if (!h.is_response && h.command == Command::kPush) {
    on_candidate(std::move(message));
  } else if (h.is_response && h.command == Command::kPull) {
    on_pull_response(message);
  }
  // Acks of our own pushes need nothing.
}

void Validator::on_candidate(Message message) {
  const auto& h = message.header;
  const auto round = h.iteration;
  const int worker = h.customer_id;
  std::string why;
  const PartitionSpec* partition = nullptr;
  try {
    partition = &workload_.partition(h.key);
  } catch (const std::out_of_range&) {
    why = "unknown key";
  }
  if (why.empty() && (role_of(h.sender) != Role::kServer || h.app_id != kCandidateApp))
    why = "not a server's forwarded push";
  else if (why.empty() && (worker >= options_.workers || worker % options_.validators != rank_))
    why = "worker " + std::to_string(worker) + " is not one of this validator's";
  else if (why.empty() && !plan_.pushes(worker, round, partition->tensor))
    why = "worker " + std::to_string(worker) +
          " does not push this tensor in this round (train.participation, "
          "train.drop_rate)";
  else if (why.empty() && partition->bytes != message.payload.size())
    why = std::to_string(message.payload.size()) + " bytes, expected " + std::to_string(partition->bytes);
  else if (why.empty() && options_.sync && (round < judged_ || round > round_ + 1))
    why = "round " + std::to_string(round) + " while judging round " + std::to_string(round_);
  else if (why.empty() && !options_.sync && round >= static_cast<std::uint32_t>(options_.iterations))
    why = "round " + std::to_string(round) + " beyond workload.iterations";
  else if (why.empty() && candidates_.contains({round, worker, h.key}))
    why = "a second push for this slot (the first is not judged yet)";
  else if (why.empty() && !options_.sync && parts_in_.contains({round, worker}) &&
           parts_in_.at({round, worker}) == workload_.partitions().size())
    why = "a push for an update already complete";
  observer_.tag_checked(rt_.self(), why.empty(),
                        why.empty() ? std::string()
                                    : "validator " + std::to_string(rank_) + " refused worker " +
                                          std::to_string(worker) + "'s key " + std::to_string(h.key) +
                                          " of round " + std::to_string(round) + ": " + why);
  if (!why.empty()) return;
  candidates_.emplace(Slot{round, worker, h.key}, std::move(message.payload));
  const std::size_t in = ++parts_in_[{round, worker}];
  if (!options_.sync && in == workload_.partitions().size()) ready_.push_back({worker, round});
  next();
}

std::vector<float> Validator::take_update(std::uint32_t round, int worker) {
  std::vector<float> update(params_.size());
  for (const auto& partition : workload_.partitions()) {
    auto node = candidates_.extract(Slot{round, worker, partition.key});
    if (node.empty()) continue;  // a tensor the worker dropped (RoundPlan): a zero update
    const auto values = node.mapped().floats();
    std::copy(values.begin(), values.end(),
              update.begin() + static_cast<std::ptrdiff_t>(element_offset(partition)));
  }
  if (options_.sync) parts_in_.erase({round, worker});
  return update;
}

std::vector<float> Validator::reference(std::uint32_t round) {
  const int steps = options_.local_steps;
  const float lr = training_.learning_rate(round);
  std::vector<float> x = params_, grad(params_.size()), mean(params_.size(), 0.0f);
  for (int s = 0; s < steps; ++s) {
    trainer_->step(x, grad);
    for (std::size_t i = 0; i < x.size(); ++i) {
      mean[i] += grad[i] / static_cast<float>(steps);
      x[i] -= lr * grad[i];
    }
  }
  // Workers with train.local_steps = H push the sum of H gradients: v in the same units.
  const int worker_steps = options_.worker_local_steps;
  if (worker_steps > 1)
    for (float& value : mean) value *= static_cast<float>(worker_steps);
  if (reference_momentum_) reference_momentum_->apply(params_, mean);
  return mean;
}

void Validator::next() {
  if (busy_) return;
  if (options_.sync) {
    if (!model_current_) return;
    for (int worker : workers_) {
      if (!plan_.participates(worker, round_)) continue;
      auto it = parts_in_.find({round_, worker});
      const std::size_t in = it == parts_in_.end() ? 0 : it->second;
      if (in < expected_keys(round_, worker)) return;
    }
    judge_round(round_);
    return;
  }
  if (ready_.empty()) return;
  const auto k = static_cast<std::uint64_t>(options_.refresh_every);
  const bool refresh_due = uses_reference(rule_.kind) && (reference_.empty() || judged_ % k == 0);
  if (refresh_due && !model_current_) {
    pull_model(static_cast<std::uint32_t>(judged_));
    return;
  }
  const Update update = ready_.front();
  ready_.pop_front();
  judge_one(update);
}

std::size_t Validator::expected_keys(std::uint32_t round, int worker) const {
  std::size_t keys = 0;
  for (const auto& partition : workload_.partitions())
    keys += plan_.pushes(worker, round, partition.tensor) ? 1 : 0;
  return keys;
}

void Validator::judge_round(std::uint32_t round) {
  busy_ = true;
  judged_ = round + 1;  // sync: rounds judged
  auto updates = std::make_shared<std::vector<std::vector<float>>>();
  auto judged = std::make_shared<std::vector<int>>();  // this round's participants among ours
  for (int worker : workers_) {
    if (!plan_.participates(worker, round)) continue;
    updates->push_back(take_update(round, worker));
    judged->push_back(worker);
  }
  auto result = std::make_shared<Aggregate>();
  auto error = std::make_shared<std::string>();
  const double flops = training_.model().train_flops_per_sample() * static_cast<double>(options_.batch) *
                           (uses_reference(rule_.kind) ? options_.local_steps : 0) +
                       6.0 * static_cast<double>(updates->size() * params_.size());
  auto work = guarded(error, [this, updates, result, round] {
    if (updates->empty()) {  // none of ours takes part this round (train.participation): a zero sum
      result->value.assign(params_.size(), 0.0f);
      return;
    }
    std::vector<std::span<const float>> views(updates->begin(), updates->end());
    std::vector<TensorSlice> tensors;
    for (const auto& t : training_.model().tensors()) tensors.push_back({t.offset, t.size()});
    RuleInputs inputs{.candidates = views, .params = params_, .tensors = tensors, .center = center_};
    if (uses_reference(rule_.kind)) {
      reference_ = reference(round);
      inputs.reference = reference_;
    }
    std::unique_ptr<MlpBatchLoss> loss;
    if (rule_.kind == RuleKind::kZeno) {
      // f_r on the round's validation batch: a window of the held-out shard, moving each round.
      const auto batch = std::min<std::size_t>(static_cast<std::size_t>(options_.batch), held_out_.size());
      std::vector<std::uint32_t> indices;
      for (std::size_t i = 0; i < batch; ++i)
        indices.push_back(held_out_[(static_cast<std::size_t>(round) * batch + i) % held_out_.size()]);
      loss = std::make_unique<MlpBatchLoss>(training_.model(), training_.train_data(), indices);
      inputs.loss = std::ref(*loss);
    }
    *result = aggregate(rule_, inputs);
    if (rule_.kind == RuleKind::kCenteredClipping) center_ = result->value;
  });
  auto done = [this, result, error, round, judged] {
    if (!error->empty()) return fail_round(round, *error);
    for (std::size_t i = 0; i < judged->size(); ++i)
      observer_.candidate_judged(rank_, (*judged)[i], round, result->decisions[i].accepted);
    // The servers add the validators' sums: weight ours by our share of the round's participants.
    const float share = static_cast<float>(judged->size()) / static_cast<float>(plan_.participants(round));
    for (auto& value : result->value) value *= share;
    send_sums(round, rank_, result->value);
    busy_ = false;
    model_current_ = false;
    pull_model(round);
  };
  compute_stage_.submit(0, "validate", ComputeCost{0, flops}, std::move(work), std::move(done));
}

void Validator::judge_one(Update update) {
  busy_ = true;
  auto candidate = std::make_shared<std::vector<float>>(take_update(update.round, update.worker));
  parts_in_.erase({update.round, update.worker});
  const bool refresh = uses_reference(rule_.kind) && model_current_;
  auto result = std::make_shared<Aggregate>();
  auto error = std::make_shared<std::string>();
  const double flops = training_.model().train_flops_per_sample() * static_cast<double>(options_.batch) *
                           (refresh ? options_.local_steps : 0) +
                       6.0 * static_cast<double>(params_.size());
  auto work = guarded(error, [this, candidate, result, refresh, update] {
    if (refresh) reference_ = reference(update.round);
    const std::span<const float> view(*candidate);
    std::vector<TensorSlice> tensors;
    for (const auto& t : training_.model().tensors()) tensors.push_back({t.offset, t.size()});
    *result = aggregate(rule_, RuleInputs{.candidates = std::span(&view, 1),
                                          .reference = reference_,
                                          .params = params_,
                                          .tensors = tensors});
  });
  auto done = [this, result, error, refresh, update] {
    if (!error->empty()) return fail_round(update.round, *error);
    observer_.candidate_judged(rank_, update.worker, update.round, result->decisions.front().accepted);
    ++judged_;
    if (refresh) model_current_ = false;
    // Every judged update gets an answer per key (empty: rejected): the servers ack the worker then.
    send_sums(update.round, update.worker,
              result->decisions.front().weight != 0 ? result->value : std::span<const float>{});
    busy_ = false;
    next();
  };
  compute_stage_.submit(0, "validate", ComputeCost{0, flops}, std::move(work), std::move(done));
}

std::function<void()> Validator::guarded(std::shared_ptr<std::string> error, std::function<void()> work) {
  // A rule error (e.g. the validator's own loss turned non-finite) must fail the run with its text, not
  // escape the compute stage and abort the process.
  return [error = std::move(error), work = std::move(work)] {
    try {
      work();
    } catch (const std::exception& e) {
      *error = e.what();
    }
  };
}

void Validator::fail_round(std::uint32_t round, const std::string& error) {
  busy_ = false;
  rt_.fail("could not judge round " + std::to_string(round) + ": " + error);
}

void Validator::send_sums(std::uint32_t round, int tag, std::span<const float> sum) {
  for (const auto& partition : workload_.partitions()) {
    Payload payload;
    if (!sum.empty()) {
      auto buffer = std::make_shared<ByteBuffer>(partition.bytes,
                                                 ByteBuffer::ForOverwrite{});  // fully copied over below
      const auto slice = sum.subspan(element_offset(partition), partition.bytes / sizeof(float));
      std::copy(slice.begin(), slice.end(), buffer->floats().begin());
      payload = Payload::adopt(std::move(buffer));
    }
    MessageHeader fields;
    fields.key = partition.key;
    fields.iteration = round;
    fields.partition = partition.part;
    fields.priority = partition.priority;
    fields.app_id = kVerdictApp;
    fields.customer_id = static_cast<std::uint16_t>(tag);
    send_to(server_id(partition.server_rank), Command::kPush, fields, std::move(payload));
  }
}

void Validator::pull_model(std::uint32_t round) {
  busy_ = !options_.sync;  // async: nothing is judged until the fresh model is in
  pulls_outstanding_ = workload_.partitions().size();
  for (const auto& partition : workload_.partitions()) {
    MessageHeader fields;
    fields.key = partition.key;
    fields.iteration = round;
    fields.partition = partition.part;
    fields.priority = partition.priority;
    send_to(server_id(partition.server_rank), Command::kPull, fields);
  }
}

void Validator::on_pull_response(const Message& message) {
  const auto& partition = workload_.partition(message.header.key);
  if (message.payload.size() != partition.bytes || pulls_outstanding_ == 0) {
    std::ostringstream out;
    out << "validator " << rank_ << ": a model pull answered with " << message.payload.size()
        << " bytes for key " << partition.key << " (expected " << partition.bytes << ", "
        << pulls_outstanding_ << " pulls open)";
    rt_.fail(out.str());
    return;
  }
  const auto values = message.payload.floats();
  std::ranges::copy(values,
                    std::next(params_.begin(), static_cast<std::ptrdiff_t>(element_offset(partition))));
  if (--pulls_outstanding_ > 0) return;
  model_current_ = true;
  if (options_.sync)
    ++round_;
  else
    busy_ = false;
  next();
}

std::string Validator::describe_app_state() const {
  std::ostringstream out;
  out << (options_.sync ? "sync" : "async") << " validator of " << workers_.size() << " workers: round "
      << round_ << ", " << candidates_.size() << " keys waiting, " << judged_ << " judged"
      << (busy_ ? ", busy" : "") << (pulls_outstanding_ ? ", pulling the model" : "");
  return out.str();
}

}  // namespace pstwin::zeno
