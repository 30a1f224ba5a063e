#include "ps/server.hpp"

#include "ps/ids.hpp"

namespace pstwin {

Server::Server(NodeContext context, int rank, const ServerOptions& options, const JobShape& job,
               const UpdateRule& rule)
    : PsNode(context, Role::kServer, rank),
      aggregator_(context.runtime, options.aggregator, context.observer, job, rule,
                  context.runtime.executor("engine", options.aggregator.engine_threads),
                  "server " + std::to_string(rank)),
      sync_(options.aggregator.sync),
      equal_shares_workers_(options.load_balanced && options.equal_shares ? options.workers : 0) {
  if (options.load_balanced) {
    decisions_ = std::make_unique<DecisionBook>(job.workload.partitions(), options.servers,
                                                options.worker_aggregators);
    intake_ = std::make_unique<RangeIntake>(rt_, options.intake, observer_, job.workload, *decisions_,
                                            monitor_, true);
  }
}

void Server::on_app_message(Message message) {
  if (message.header.command == Command::kLbDecision) {
    on_decision(message);
    return;
  }
  if (message.header.command == Command::kLocalReduce) {
    rt_.log("server: ignoring local_reduce from node " + std::to_string(message.header.sender) +
            ": it goes between the workers of one host");
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
  if (equal_shares_workers_ > 0) {
    // Every worker pushes this server the same partitions and pulls the same aggregates, in probes
    // and balanced iterations alike, and each key waits for all of them: hold each connection to an
    // equal share of the NIC both ways, so that one the link's sharing favours does not run ahead
    // while another falls behind (docs/FPT.md "Equal shares at a server").
    std::vector<PeerWeight> weights{{kHoldEveryPeer, 1}};
    for (int w = 0; w < equal_shares_workers_; ++w) weights.push_back({worker_id(w), 1});
    rt_.set_send_weights(1, weights);
    rt_.set_receive_weights(1, weights);
  }
}

void Server::on_decision(const Message& message) {
  const LbDecision* decision = take_decision(decisions_.get(), message);
  if (!decision) return;
  for (auto& request : intake_->release(*decision)) dispatch(std::move(request));
}

void Server::dispatch(Message message) {
  if (message.header.is_response) {
    rt_.log("server: unexpected response from node " + std::to_string(message.header.sender));
    return;
  }
  aggregator_.handle(std::move(message));
}

void Server::on_shutdown() {
  if (!sync_) aggregator_.report_final_stores();
}

std::string Server::describe_app_state() const {
  std::string state = aggregator_.describe();
  if (intake_ && intake_->held())
    state += "; " + std::to_string(intake_->held()) + " requests wait for their decision";
  return state;
}

}  // namespace pstwin
