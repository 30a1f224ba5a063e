// Observers (InvariantChecker, RunRecorder) are single-threaded; real nodes report from several
// event-loop threads at once, so every report goes through one mutex. Every RunObserver method must
// be forwarded here: one left to the base's empty default is silently lost on the real backend.
#pragma once

#include <mutex>

#include "ps/observer.hpp"

namespace pstwin::realnet {

class LockedObserver final : public RunObserver {
 public:
  explicit LockedObserver(RunObserver& target) : target_(target) {}
  void node_table(const std::vector<NodeInfo>& table, Seconds at) override {
    std::lock_guard lock(mutex_);
    target_.node_table(table, at);
  }
  void barrier_released(int group, Seconds at) override {
    std::lock_guard lock(mutex_);
    target_.barrier_released(group, at);
  }
  void push_applied(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) override {
    std::lock_guard lock(mutex_);
    target_.push_applied(server, worker, key, iteration);
  }
  void duplicate_push(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) override {
    std::lock_guard lock(mutex_);
    target_.duplicate_push(server, worker, key, iteration);
  }
  void aggregate_complete(NodeId server, std::uint64_t key, std::uint32_t iteration,
                          const Payload& agg) override {
    std::lock_guard lock(mutex_);
    target_.aggregate_complete(server, key, iteration, agg);
  }
  void pull_received(int worker, std::uint64_t key, std::uint32_t iteration, const Payload& value) override {
    std::lock_guard lock(mutex_);
    target_.pull_received(worker, key, iteration, value);
  }
  void iteration_done(int worker, std::uint32_t iteration, Seconds start, Seconds end) override {
    std::lock_guard lock(mutex_);
    target_.iteration_done(worker, iteration, start, end);
  }
  void late_push(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) override {
    std::lock_guard lock(mutex_);
    target_.late_push(server, worker, key, iteration);
  }
  void worker_lost(int worker, Seconds at) override {
    std::lock_guard lock(mutex_);
    target_.worker_lost(worker, at);
  }
  void final_store(NodeId server, std::uint64_t key, const Payload& store) override {
    std::lock_guard lock(mutex_);
    target_.final_store(server, key, store);
  }
  void tag_checked(NodeId node, bool ok, const std::string& why) override {
    std::lock_guard lock(mutex_);
    target_.tag_checked(node, ok, why);
  }
  void push_staleness(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration,
                      std::uint64_t staleness, bool applied) override {
    std::lock_guard lock(mutex_);
    target_.push_staleness(server, worker, key, iteration, staleness, applied);
  }
  void candidate_judged(int validator, int worker, std::uint32_t iteration, bool accepted) override {
    std::lock_guard lock(mutex_);
    target_.candidate_judged(validator, worker, iteration, accepted);
  }
  void rule_judged(NodeId server, std::uint64_t key, std::uint32_t iteration,
                   const CandidateJudgement& judgement) override {
    std::lock_guard lock(mutex_);
    target_.rule_judged(server, key, iteration, judgement);
  }
  void model_snapshot(int worker, std::uint32_t iterations, Seconds at,
                      std::span<const float> params) override {
    std::lock_guard lock(mutex_);
    target_.model_snapshot(worker, iterations, at, params);
  }
  void lb_decision(NodeId node, const LbDecision& decision) override {
    std::lock_guard lock(mutex_);
    target_.lb_decision(node, decision);
  }
  void lb_report(NodeId from, const LbReport& report) override {
    std::lock_guard lock(mutex_);
    target_.lb_report(from, report);
  }
  void request_routed(NodeId receiver, NodeId sender, std::uint64_t key, std::uint32_t iteration) override {
    std::lock_guard lock(mutex_);
    target_.request_routed(receiver, sender, key, iteration);
  }

 private:
  std::mutex mutex_;
  RunObserver& target_;
};

}  // namespace pstwin::realnet
