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
#include "scenario/scenario.hpp"

namespace pstwin {

class Scheduler final : public Node {
 public:
  Scheduler(Runtime& runtime, const Scenario& scenario, RunObserver& observer);

  void start() override;
  void on_message(Message message) override;
  std::string describe_state() const override;

 private:
  void on_register(const Message& message);
  void assign_ids();
  void on_barrier(const Message& message);
  void on_lb_report(const Message& message);
  void check_heartbeats();
  void broadcast(Command command, const std::vector<NodeId>& to);
  std::vector<NodeId> members(int group_mask) const;
  void send(NodeId to, Command command, bool response, std::uint64_t key, Payload payload = {});

  Runtime& rt_;
  const Scenario& scenario_;
  RunObserver& observer_;
  int expected_servers_;
  int expected_workers_;
  int expected_validators_;
  std::vector<NodeInfo> registrations_;  // in arrival order until ids are assigned
  std::vector<NodeInfo> table_;
  std::map<int, std::set<NodeId>> barrier_arrivals_;  // group mask -> nodes waiting
  std::map<NodeId, Seconds> last_seen_;
  std::set<NodeId> workers_done_;
  std::set<NodeId> shutdown_acks_;
  bool shutting_down_ = false;
  // ps.balancing = "lb" only.
  std::vector<PartitionSpec> partitions_;
  std::unique_ptr<LoadBalancer> balancer_;
};

}  // namespace pstwin
