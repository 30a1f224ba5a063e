// A parameter server (BytePS's server): an Aggregator (aggregator.hpp: the store, its rounds and the
// update rule) behind the control plane every node shares. BYTEPS_SERVER_ENGINE_THREAD engine lanes.
// ps.balancing = "lb": keys are owned per iteration as the scheduler's decision says; requests pass a
// RangeIntake (src/ps/lb_intake.hpp): one that arrives before its iteration's decision waits for it.
#pragma once

#include <memory>
#include <string>

#include "ps/aggregator.hpp"
#include "ps/balance.hpp"
#include "ps/lb_intake.hpp"
#include "ps/ps_node.hpp"
#include "ps/update_rule.hpp"
#include "ps/workload.hpp"

namespace pstwin {

class Server final : public PsNode {
 public:
  // `job` and `rule` must outlive the server.
  Server(NodeContext context, int rank, const ServerOptions& options, const JobShape& job,
         const UpdateRule& rule = UpdateRule::sum());

 private:
  void on_ready() override;
  void on_app_message(Message message) override;
  void on_shutdown() override;
  void on_worker_lost(int rank) override { aggregator_.worker_lost(rank); }
  std::string describe_app_state() const override;

  // ps.balancing = "lb": take up a decision and serve the requests that waited for it.
  void on_decision(const Message& message);
  void dispatch(Message message);

  Aggregator aggregator_;
  const bool sync_;                          // ps.mode
  const int equal_shares_workers_;           // lb.server_equal_shares: workers to hold to equal shares
  std::unique_ptr<DecisionBook> decisions_;  // lb only
  BandwidthMonitor monitor_;                 // lb only
  std::unique_ptr<RangeIntake> intake_;      // lb only
};

}  // namespace pstwin
