#include "ps/server.hpp"

#include "ps/ids.hpp"

namespace pstwin {

Server::Server(NodeContext context, int rank, const SyntheticWorkload& workload, const UpdateRule& rule)
    : PsNode(context, Role::kServer, rank),
      aggregator_(context.runtime, context.scenario, context.observer, workload, rule,
                  context.runtime.executor("engine", context.scenario.ps.server_engine_threads),
                  "server " + std::to_string(rank)) {
  if (context.scenario.lb.balancing == Balancing::kLb) {
    decisions_ = std::make_unique<DecisionBook>(
        workload.partitions(), context.scenario.roles.servers,
        context.scenario.lb.worker_aggregators ? context.scenario.roles.workers : 0);
    intake_ = std::make_unique<RangeIntake>(rt_, scenario_, observer_, workload, *decisions_, monitor_, true);
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
  if (scenario_.ps.mode == TrainingMode::kAsync) aggregator_.report_final_stores();
}

std::string Server::describe_app_state() const {
  std::string state = aggregator_.describe();
  if (intake_ && intake_->held())
    state += "; " + std::to_string(intake_->held()) + " requests wait for their decision";
  return state;
}

}  // namespace pstwin
