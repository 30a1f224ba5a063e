// What protocol code reports about a run. Invariant checkers and result recorders implement it; the
// protocol never depends on what they do with it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/payload.hpp"
#include "core/types.hpp"
#include "ps/balance.hpp"
#include "ps/candidate_judgement.hpp"
#include "ps/control.hpp"

namespace pstwin {

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void node_table(const std::vector<NodeInfo>& /*table*/, Seconds /*at*/) {}
  virtual void barrier_released(int /*group*/, Seconds /*at*/) {}
  virtual void push_applied(NodeId /*server*/, int /*worker_rank*/, std::uint64_t /*key*/,
                            std::uint32_t /*iteration*/) {}
  virtual void duplicate_push(NodeId /*server*/, int /*worker_rank*/, std::uint64_t /*key*/,
                              std::uint32_t /*iteration*/) {}
  // ps.backup_workers: a push that came after its round completed; acknowledged, never applied.
  virtual void late_push(NodeId /*server*/, int /*worker_rank*/, std::uint64_t /*key*/,
                         std::uint32_t /*iteration*/) {}
  // Sync mode: the aggregate of one key and iteration is complete (all workers' pushes summed).
  virtual void aggregate_complete(NodeId /*server*/, std::uint64_t /*key*/, std::uint32_t /*iteration*/,
                                  const Payload& /*aggregate*/) {}
  virtual void pull_received(int /*worker_rank*/, std::uint64_t /*key*/, std::uint32_t /*iteration*/,
                             const Payload& /*value*/) {}
  virtual void iteration_done(int /*worker_rank*/, std::uint32_t /*iteration*/, Seconds /*start*/,
                              Seconds /*end*/) {}
  // ps.on_worker_loss = "continue": the scheduler declared this worker dead and the job goes on.
  virtual void worker_lost(int /*worker_rank*/, Seconds /*at*/) {}
  // Async mode, at shutdown: the final value of a key's store.
  virtual void final_store(NodeId /*server*/, std::uint64_t /*key*/, const Payload& /*store*/) {}
  // ZenoPS tags: a message matched an open (round, worker, tensor) slot (ok), or was refused (why).
  virtual void tag_checked(NodeId /*node*/, bool /*ok*/, const std::string& /*why*/) {}
  // Async with ps.max_staleness: a push arrived `staleness` versions of its key after the worker's
  // last pull of it; applied when within the bound, else refused (acknowledged, never applied).
  virtual void push_staleness(NodeId /*server*/, int /*worker_rank*/, std::uint64_t /*key*/,
                              std::uint32_t /*iteration*/, std::uint64_t /*staleness*/, bool /*applied*/) {}
  // A validator's decision on worker `worker`'s update of round `iteration`.
  virtual void candidate_judged(int /*validator*/, int /*worker*/, std::uint32_t /*iteration*/,
                                bool /*accepted*/) {}
  // A robust rule on server `server` combined round `iteration` of `key`: its judgement of a worker's
  // gradient (zeno.rule without validators; the plain mean judges nothing).
  virtual void rule_judged(NodeId /*server*/, std::uint64_t /*key*/, std::uint32_t /*iteration*/,
                           const CandidateJudgement& /*judgement*/) {}
  // workload.kind = "mlp": worker 0's parameters after `iterations` iterations, `at` seconds after its
  // first iteration began (evaluated later, outside the timed run).
  virtual void model_snapshot(int /*worker_rank*/, std::uint32_t /*iterations*/, Seconds /*at*/,
                              std::span<const float> /*params*/) {}
  // ps.balancing = "lb": a node took up (or the scheduler made) a decision; the scheduler received
  // a node's measurements; a server accepted a push or pull from a worker (checked against the
  // decision in force for that iteration: nothing may reach a node that does not own the key).
  virtual void lb_decision(NodeId /*node*/, const LbDecision& /*decision*/) {}
  virtual void lb_report(NodeId /*from*/, const LbReport& /*report*/) {}
  virtual void request_routed(NodeId /*receiver*/, NodeId /*sender*/, std::uint64_t /*key*/,
                              std::uint32_t /*iteration*/) {}
};

// Forwards every report to several observers, in order.
class ObserverFanout final : public RunObserver {
 public:
  explicit ObserverFanout(std::vector<RunObserver*> targets) : targets_(std::move(targets)) {}
  void node_table(const std::vector<NodeInfo>& table, Seconds at) override {
    for (auto* t : targets_) t->node_table(table, at);
  }
  void barrier_released(int group, Seconds at) override {
    for (auto* t : targets_) t->barrier_released(group, at);
  }
  void push_applied(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) override {
    for (auto* t : targets_) t->push_applied(server, worker, key, iteration);
  }
  void duplicate_push(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) override {
    for (auto* t : targets_) t->duplicate_push(server, worker, key, iteration);
  }
  void late_push(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration) override {
    for (auto* t : targets_) t->late_push(server, worker, key, iteration);
  }
  void aggregate_complete(NodeId server, std::uint64_t key, std::uint32_t iteration,
                          const Payload& agg) override {
    for (auto* t : targets_) t->aggregate_complete(server, key, iteration, agg);
  }
  void pull_received(int worker, std::uint64_t key, std::uint32_t iteration, const Payload& value) override {
    for (auto* t : targets_) t->pull_received(worker, key, iteration, value);
  }
  void iteration_done(int worker, std::uint32_t iteration, Seconds start, Seconds end) override {
    for (auto* t : targets_) t->iteration_done(worker, iteration, start, end);
  }
  void worker_lost(int worker, Seconds at) override {
    for (auto* t : targets_) t->worker_lost(worker, at);
  }
  void final_store(NodeId server, std::uint64_t key, const Payload& store) override {
    for (auto* t : targets_) t->final_store(server, key, store);
  }
  void tag_checked(NodeId node, bool ok, const std::string& why) override {
    for (auto* t : targets_) t->tag_checked(node, ok, why);
  }
  void push_staleness(NodeId server, int worker, std::uint64_t key, std::uint32_t iteration,
                      std::uint64_t staleness, bool applied) override {
    for (auto* t : targets_) t->push_staleness(server, worker, key, iteration, staleness, applied);
  }
  void candidate_judged(int validator, int worker, std::uint32_t iteration, bool accepted) override {
    for (auto* t : targets_) t->candidate_judged(validator, worker, iteration, accepted);
  }
  void rule_judged(NodeId server, std::uint64_t key, std::uint32_t iteration,
                   const CandidateJudgement& judgement) override {
    for (auto* t : targets_) t->rule_judged(server, key, iteration, judgement);
  }
  void model_snapshot(int worker, std::uint32_t iterations, Seconds at,
                      std::span<const float> params) override {
    for (auto* t : targets_) t->model_snapshot(worker, iterations, at, params);
  }
  void lb_decision(NodeId node, const LbDecision& decision) override {
    for (auto* t : targets_) t->lb_decision(node, decision);
  }
  void lb_report(NodeId from, const LbReport& report) override {
    for (auto* t : targets_) t->lb_report(from, report);
  }
  void request_routed(NodeId receiver, NodeId sender, std::uint64_t key, std::uint32_t iteration) override {
    for (auto* t : targets_) t->request_routed(receiver, sender, key, iteration);
  }

 private:
  std::vector<RunObserver*> targets_;
};

}  // namespace pstwin
