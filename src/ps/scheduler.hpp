// The scheduler (ps-lite node 1): registration and id assignment, node table broadcast, barriers
// per group, heartbeat watch, and orderly shutdown once every worker is done. With
// ps.balancing = "lb" it also runs the load balancer: reports in, decisions out.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/runtime.hpp"
#include "ps/control.hpp"
#include "ps/load_balancer.hpp"
#include "ps/observer.hpp"
#include "ps/role_options.hpp"

namespace pstwin {

class Scheduler final : public Node {
 public:
  // `balancer`: ps.balancing = "lb" (null: hash routing, no reports).
  Scheduler(Runtime& runtime, SchedulerOptions options, RunObserver& observer,
            std::unique_ptr<LoadBalancer> balancer = nullptr);

  void start() override;
  void on_message(Message message) override;
  std::string describe_state() const override;
  // Tells every live node why the job ends (kFatal naming the node that failed), so none waits for
  // a peer that is gone: ps-lite's nodes would wait forever.
  void on_failing(std::string_view why) override;

 private:
  void on_register(const Message& message);
  // Answers a registration before the node has an id: through a connection of its own.
  void answer_registrant(const NodeInfo& info, std::uint64_t answer, Payload body = {});
  // Ends the job because `culprit` failed (kNoNode: none in the table): every other node is told.
  void fail_job(NodeId culprit, const std::string& text);
  std::string describe_node(NodeId id) const;  // "worker 1 (node 11 at 127.0.0.1:4242)"
  void assign_ids();
  void on_barrier(const Message& message);
  void release_barrier(int group);  // if every live member of `group` has arrived
  void on_lb_report(const Message& message);
  void check_heartbeats();
  // ps.on_worker_loss = "continue": the job goes on without worker `info`; every live node is told.
  void lose_worker(const NodeInfo& info, const std::string& why);
  // After a loss: a barrier, the workers' done count or the shutdown acks may be complete now.
  void recheck_after_loss();
  void maybe_shut_down();
  int live_workers() const { return expected_workers_ - static_cast<int>(lost_workers_.size()); }
  void broadcast(Command command, const std::vector<NodeId>& to);
  bool in_table(NodeId id) const;  // table_ is sorted by id
  // The live nodes of the groups in `group_mask`, in id order (kept until the table or the lost
  // workers change: every barrier arrival checks its sender against them).
  const std::vector<NodeId>& members(int group_mask) const;
  void send(NodeId to, Command command, bool response, std::uint64_t key, Payload payload = {});

  Runtime& rt_;
  const SchedulerOptions options_;
  RunObserver& observer_;
  int expected_servers_;
  int expected_workers_;
  int expected_validators_;
  std::vector<NodeInfo> registrations_;                 // in arrival order until ids are assigned
  std::vector<NodeInfo> table_;                         // by id
  mutable std::map<int, std::vector<NodeId>> members_;  // members(), by group mask
  std::map<int, std::set<NodeId>> barrier_arrivals_;    // group mask -> nodes waiting
  std::map<NodeId, Seconds> last_seen_;
  std::set<NodeId> workers_done_;
  std::set<NodeId> shutdown_acks_;
  bool shutting_down_ = false;
  std::string job_digest_;         // of options_.control.job_fields: a registration must match it
  NodeId next_registrant_id_;      // connection ids for answers before the node table
  std::set<NodeId> gone_;          // failed or left: told nothing more
  std::set<NodeId> lost_workers_;  // ps.on_worker_loss = "continue": declared dead, the job goes on
  std::set<NodeId> fenced_;        // ... and heard from again: told to end
  bool relaying_ = false;          // the job fails for a node's failure (fail_job), not the scheduler's
  std::unique_ptr<LoadBalancer> balancer_;  // ps.balancing = "lb" only
};

}  // namespace pstwin
