#include "ps/invariants.hpp"

#include <limits>
#include <sstream>

#include "core/digest.hpp"
#include "ps/ids.hpp"
#include "ps/lb_intake.hpp"
#include "ps/round_plan.hpp"

namespace pstwin {
namespace {
constexpr std::size_t kMaxKept = 100;

std::string where(NodeId server, std::uint64_t key, std::uint32_t iteration) {
  std::ostringstream out;
  out << "server " << server << " (rank " << rank_of(server) << "), key " << key << ", iteration "
      << iteration;
  return out.str();
}
}  // namespace

InvariantChecker::InvariantChecker(const Scenario& scenario, const SyntheticWorkload& workload)
    : scenario_(scenario), workload_(workload) {}

void InvariantChecker::count_check(const std::string& invariant) {
  ++checked_;
  ++tallies_[invariant].checked;
}

void InvariantChecker::add(Violation violation, NodeId node) {
  if (clock_) violation.time_s = clock_();
  violation.node = node;
  ++violation_count_;
  ++tallies_[violation.invariant].violated;
  if (violations_.size() < kMaxKept) violations_.push_back(std::move(violation));
}

void InvariantChecker::push_applied(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) {
  if (!scenario_.invariants.updates) return;
  count_check("updates");
  if (!applied_.insert({key, iteration, worker}).second)
    add({"updates",
         where(server, key, iteration) + ": push of worker " + std::to_string(worker) + " applied twice"},
        server);
}

// ps.max_staleness: a refused push is accounted for (not lost), and counts once like an applied one.
void InvariantChecker::push_staleness(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration,
                                      std::uint64_t /*staleness*/, bool applied) {
  if (!applied) push_applied(server, worker, key, iteration);
}

void InvariantChecker::duplicate_push(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) {
  if (!scenario_.invariants.updates) return;
  count_check("updates");
  add({"updates", where(server, key, iteration) + ": worker " + std::to_string(worker) +
                      " pushed twice in one round (second push refused)"},
      server);
}

void InvariantChecker::check_sum(std::string_view what, NodeId server, std::uint64_t key,
                                 std::uint32_t iteration, const Payload& value, bool whole_run) {
  // A trained model's values are not known in advance: only the synthetic workload's sums are checked.
  if (!scenario_.invariants.aggregates || value.is_phantom() ||
      scenario_.workload.kind != WorkloadKind::kSynthetic)
    return;
  count_check("aggregates");
  const auto& spec = workload_.partition(key);
  if (value.size() != spec.bytes) {
    add({"aggregates", where(server, key, iteration) + ": " + std::string(what) + " has " +
                           std::to_string(value.size()) + " bytes, expected " + std::to_string(spec.bytes)},
        server);
    return;
  }
  const auto floats = value.floats();
  auto expected_at = [&](std::size_t j) {
    if (!lost_.empty() || scenario_.ps.backup_workers > 0)
      return expected_applied_sum(key, iteration, j, whole_run);
    return whole_run ? workload_.expected_total(key, j) : workload_.expected_round_sum(iteration, key, j);
  };
  std::size_t wrong = 0;
  std::size_t first = 0;
  bool same_offset = true;  // every element off by one amount: a whole contribution was swapped
  float offset = 0;
  for (std::size_t j = 0; j < floats.size(); ++j) {
    const float expected = expected_at(j);
    const float diff = floats[j] - expected;
    if (j == 0) offset = diff;
    same_offset = same_offset && diff == offset;
    if (floats[j] != expected && wrong++ == 0) first = j;
  }
  if (wrong == 0) return;
  const float expected = expected_at(first);
  std::ostringstream out;
  out << where(server, key, iteration) << ": " << what << " differs from the sum of the "
      << (lost_.empty() && scenario_.ps.backup_workers == 0
              ? std::to_string(workload_.workers()) + " workers'"
              : std::string("applied"))
      << " contributions in " << wrong << " of " << floats.size() << " elements (element " << first << " = "
      << floats[first] << ", expected " << expected << ")";
  if (same_offset)
    out << "; every element is off by " << offset
        << ": one worker's push carried another worker's values (crossed line: see staging.naming)";
  else
    out << "; a contribution was counted twice, lost or corrupted";
  add({"aggregates", out.str()}, server);
}

float InvariantChecker::expected_applied_sum(std::uint64_t key, std::uint32_t iteration, std::size_t element,
                                             bool whole_run) const {
  float sum = 0;
  const auto first = whole_run ? applied_.lower_bound({key, 0, std::numeric_limits<int>::min()})
                               : applied_.lower_bound({key, iteration, std::numeric_limits<int>::min()});
  for (auto it = first; it != applied_.end() && std::get<0>(*it) == key; ++it) {
    if (!whole_run && std::get<1>(*it) != iteration) break;
    sum += workload_.value(std::get<2>(*it), std::get<1>(*it), key, element);
  }
  return sum;
}

void InvariantChecker::worker_lost(int worker, Seconds /*at*/) {
  lost_.insert(worker);
}

void InvariantChecker::late_push(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) {
  if (!scenario_.invariants.updates) return;
  count_check("updates");
  if (applied_.contains({key, iteration, worker}) || !late_.insert({key, iteration, worker}).second)
    add({"updates", where(server, key, iteration) + ": push of worker " + std::to_string(worker) +
                        " both applied and dropped as late, or dropped twice"});
}

void InvariantChecker::aggregate_complete(NodeId server, std::uint64_t key, std::uint32_t iteration,
                                          const Payload& agg) {
  check_sum("aggregate", server, key, iteration, agg, false);
}

void InvariantChecker::final_store(NodeId server, std::uint64_t key, const Payload& store) {
  check_sum("final store", server, key, static_cast<std::uint32_t>(workload_.iterations() - 1), store, true);
}

void InvariantChecker::tag_checked(NodeId node, bool ok, const std::string& why) {
  count_check("tags");
  if (!ok) add({"tags", why}, node);
}

void InvariantChecker::pull_received(int worker, std::uint64_t key, std::uint32_t iteration,
                                     const Payload& value) {
  if (!scenario_.invariants.sync_identical || scenario_.ps.mode != TrainingMode::kSync || value.is_phantom())
    return;
  count_check("sync_identical");
  Digest digest;
  digest.update(value.bytes());
  auto [it, first] = first_pull_digest_.try_emplace({key, iteration}, worker, digest.hex());
  if (!first && it->second.second != digest.hex())
    add({"sync_identical", "key " + std::to_string(key) + ", iteration " + std::to_string(iteration) +
                               ": worker " + std::to_string(worker) +
                               " pulled a different value than worker " + std::to_string(it->second.first)},
        worker_id(worker));
}

void InvariantChecker::lb_decision(NodeId node, const LbDecision& decision) {
  count_check("routing");
  auto [it, first] = decisions_.try_emplace(decision.iteration, decision);
  if (!first && !(it->second == decision))
    add({"routing", "node " + std::to_string(node) + " took up decision " + std::to_string(decision.version) +
                        " for iteration " + std::to_string(decision.iteration) +
                        ", which differs from version " + std::to_string(it->second.version) +
                        " another node holds for it"},
        node);
}

void InvariantChecker::request_routed(NodeId receiver, NodeId sender, std::uint64_t key,
                                      std::uint32_t iteration) {
  count_check("routing");
  const int servers = scenario_.roles.servers;
  const auto it = decisions_.find(iteration);
  const std::string what = "node " + std::to_string(sender) + "'s request for key " + std::to_string(key) +
                           ", iteration " + std::to_string(iteration) + " reached " +
                           slot_name(slot_of(receiver, servers), servers);
  if (it == decisions_.end()) {
    add({"routing", what + " before any node held a decision for that iteration"}, receiver);
    return;
  }
  const auto owner = it->second.owner.at(workload_.index_of(key));
  if (slot_node(owner, servers) != receiver)
    add({"routing", what + ", but decision " + std::to_string(it->second.version) + " gives the key to " +
                        slot_name(owner, servers) + " (a packet sent to a node that does not own its range)"},
        receiver);
}

void InvariantChecker::finish(bool run_completed) {
  if (!scenario_.invariants.updates || !run_completed) return;
  // Every worker's push of every key in every iteration must have been applied exactly once (with a
  // RoundPlan: every push the plan calls for).
  auto expected = static_cast<std::uint64_t>(workload_.partitions().size()) *
                  static_cast<std::uint64_t>(workload_.workers()) *
                  static_cast<std::uint64_t>(workload_.iterations());
  const RoundPlan plan(scenario_, workload_);
  if (plan.active()) {
    expected = 0;
    for (int it = 0; it < workload_.iterations(); ++it)
      for (const auto& partition : workload_.partitions())
        expected +=
            static_cast<std::uint64_t>(plan.pushers(static_cast<std::uint32_t>(it), partition.tensor));
  }
  if (!lost_.empty()) {
    // Survivors: every push the plan calls for; a lost worker: what it pushed before, once (checked
    // as it was applied).
    expected = 0;
    for (int it = 0; it < workload_.iterations(); ++it)
      for (const auto& partition : workload_.partitions())
        for (int w = 0; w < workload_.workers(); ++w)
          if (!lost_.contains(w) &&
              (!plan.active() || plan.pushes(w, static_cast<std::uint32_t>(it), partition.tensor)))
            ++expected;
    for (const auto& entry : applied_)
      if (lost_.contains(std::get<2>(entry))) ++expected;
  }
  if (scenario_.ps.backup_workers > 0) {
    // Each round needs all but b of its pushes; stragglers may be stopped before their last rounds,
    // so their pushes are not owed. A late push is accounted for (dropped on purpose, counted).
    std::map<std::pair<std::uint64_t, std::uint32_t>, int> applied_per_round;
    for (const auto& [key, iteration, worker] : applied_) ++applied_per_round[{key, iteration}];
    std::uint64_t short_rounds = 0;
    for (int it = 0; it < workload_.iterations(); ++it)
      for (const auto& partition : workload_.partitions()) {
        const int live = workload_.workers() - static_cast<int>(lost_.size());
        const auto found = applied_per_round.find({partition.key, static_cast<std::uint32_t>(it)});
        if ((found == applied_per_round.end() ? 0 : found->second) <
            std::max(1, live - scenario_.ps.backup_workers))
          ++short_rounds;
      }
    count_check("updates");
    if (short_rounds > 0)
      add({"updates", std::to_string(short_rounds) + " rounds were applied with fewer than roles.workers - "
                                                     "ps.backup_workers pushes (lost updates)"});
    return;
  }
  count_check("updates");
  // ps.backup_workers: a late push is accounted for (dropped on purpose, counted), not lost.
  if (applied_.size() + late_.size() != expected)
    add({"updates",
         std::to_string(expected - std::min<std::uint64_t>(expected, applied_.size() + late_.size())) +
             " of " + std::to_string(expected) + " pushes were never applied (lost updates)"});
}

}  // namespace pstwin
