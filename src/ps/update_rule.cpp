#include "ps/update_rule.hpp"

#include <algorithm>

#include "core/assert.hpp"
#include "core/float_sum.hpp"
#include "ps/training.hpp"

namespace pstwin {

std::vector<CandidateJudgement> MeanCombiner::combine(std::uint64_t /*key*/,
                                                      std::span<const std::span<const float>> gradients,
                                                      std::span<float> out) const {
  std::fill(out.begin(), out.end(), 0.0f);
  for (const auto& gradient : gradients) sum_into(out, gradient);
  const auto count = static_cast<float>(gradients.size());
  for (auto& value : out) value /= count;
  return {};
}

const UpdateRule& UpdateRule::sum() {
  static const SumRule rule;
  return rule;
}

void SumRule::fold(Round& round, const std::shared_ptr<Payload>& input) const {
  if (input->is_phantom()) {
    round.phantom = true;
    round.bytes = input->size();
    return;
  }
  if (!round.sum) {
    // COPY_FIRST without the copy when the received buffer is ours alone (a 1 MB memmove was 4 % of a
    // loopback bench's cycles).
    round.bytes = input->size();
    round.sum = input->take_sole_buffer();
    if (!round.sum) round.sum = std::make_shared<ByteBuffer>(input->bytes());
  } else if (round.sum->size() == input->size()) {
    sum_into(round.sum->floats(), input->floats());
  }
}

void SumRule::apply_async(std::uint64_t /*key*/, KeyState& state, const std::shared_ptr<Payload>& input,
                          std::uint32_t /*iteration*/) const {
  state.store_bytes = input->size();
  if (input->is_phantom()) return;
  if (!state.store) {
    state.store = std::make_shared<ByteBuffer>(input->bytes());
  } else if (state.store->size() == input->size()) {
    sum_into(state.store->floats(), input->floats());
  }
}

TrainingRule::TrainingRule(const TrainingModel& model, const SyntheticWorkload& workload, bool async)
    : model_(model), workload_(workload), async_(async) {}

void TrainingRule::init_key(std::uint64_t key, KeyState& state) const {
  // Every node derives the same initial model, so the key starts from the workers' values.
  const auto& partition = workload_.partition(key);
  const auto initial = model_.initial_parameters().subspan(
      model_.tensor_offset(partition.tensor) + partition.offset / sizeof(float),
      partition.bytes / sizeof(float));
  state.store = std::make_shared<ByteBuffer>(partition.bytes);
  state.store_bytes = partition.bytes;
  std::copy(initial.begin(), initial.end(), state.store->floats().begin());
  state.velocity.assign(initial.size(), 0.0f);
}

std::uint64_t TrainingRule::input_bytes(std::uint64_t key) const {
  return workload_.partition(key).bytes;
}

void TrainingRule::apply(KeyState& state, std::span<const float> update, std::uint32_t iteration) const {
  model_.apply(state.store->floats(), update, state.velocity, iteration);
}

void TrainingRule::snapshot(const KeyState& state, Round& round) {
  round.inputs.clear();
  round.bytes = state.store->size();
  round.sum = std::make_shared<ByteBuffer>(state.store->bytes());
}

// Async pushes and validators' sums (already weighted) add up; async scales by 1 / workers.
void TrainingRule::apply_async(std::uint64_t /*key*/, KeyState& state, const std::shared_ptr<Payload>& input,
                               std::uint32_t iteration) const {
  std::vector<float> update(state.velocity.size(), 0.0f);
  if (input->size() == update.size() * sizeof(float)) sum_into(update, input->floats());
  if (async_) {
    const auto workers = static_cast<float>(workload_.workers() - state.lost_workers);
    for (auto& value : update) value /= workers;
  }
  apply(state, update, iteration);
}

SgdRule::SgdRule(const TrainingModel& model, const SyntheticWorkload& workload, const RoundPlan& plan,
                 const GradientCombiner& combiner, bool async)
    : TrainingRule(model, workload, async), plan_(plan), combiner_(combiner) {}

void SgdRule::apply_round(std::uint64_t key, KeyState& state, Round& round, std::uint32_t iteration) const {
  PSTWIN_ASSERT(!round.complete, "a sync round applied after it completed");
  std::vector<float> update(state.velocity.size(), 0.0f);
  // By rank; a participant that dropped this tensor (RoundPlan) counts as a zero update.
  std::vector<std::span<const float>> spans;
  std::vector<int> ranks;
  const std::vector<float> zeros(update.size(), 0.0f);
  for (std::size_t w = 0; w < round.inputs.size(); ++w) {
    const auto& gradient = round.inputs[w];
    if (gradient && gradient->size() == update.size() * sizeof(float)) {
      spans.push_back(gradient->floats());
      ranks.push_back(static_cast<int>(w));
    } else if (!gradient && plan_.participates(static_cast<int>(w), iteration) &&
               std::ranges::find(round.absent, static_cast<int>(w)) == round.absent.end()) {
      spans.emplace_back(zeros);
      ranks.push_back(static_cast<int>(w));
    }
  }
  round.judgements = combiner_.combine(key, spans, update);
  PSTWIN_ASSERT(round.judgements.empty() || round.judgements.size() == ranks.size(),
                "a combiner judged " + std::to_string(round.judgements.size()) + " of " +
                    std::to_string(ranks.size()) + " gradients");
  for (std::size_t c = 0; c < round.judgements.size(); ++c) round.judgements[c].worker = ranks[c];
  apply(state, update, iteration);
  snapshot(state, round);
}

void ValidatedRule::apply_round(std::uint64_t /*key*/, KeyState& state, Round& round,
                                std::uint32_t iteration) const {
  PSTWIN_ASSERT(!round.complete, "a sync round applied after it completed");
  // Each validator's sum is already weighted by its share of the workers: they add up.
  std::vector<float> update(state.velocity.size(), 0.0f);
  for (const auto& sum : round.inputs)
    if (sum && sum->size() == update.size() * sizeof(float)) sum_into(update, sum->floats());
  apply(state, update, iteration);
  snapshot(state, round);
}

}  // namespace pstwin
