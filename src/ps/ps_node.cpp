#include "ps/ps_node.hpp"

#include <sstream>

#include "ps/ids.hpp"

namespace pstwin {

PsNode::PsNode(NodeContext context, Role role, int rank)
    : rt_(context.runtime),
      scenario_(context.scenario),
      observer_(context.observer),
      role_(role),
      rank_(rank),
      scheduler_address_(std::move(context.scheduler_address)) {}

void PsNode::start() {
  rt_.connect(kSchedulerId, scheduler_address_);
  NodeInfo me{kNoNode, role_, rank_, rt_.local_address(), rt_.host_name()};
  MessageHeader fields;
  send_to(kSchedulerId, Command::kRegister, fields, encode_node_info(me));
  const Seconds timeout = scenario_.ps.connect_timeout_s;
  connect_timer_ = rt_.start_timer(timeout, [this, timeout] {
    std::ostringstream out;
    out << role_name(role_) << " " << rank_ << " on " << rt_.host_name() << " cannot reach the scheduler at "
        << scheduler_address_ << ": no node table after " << timeout
        << " s. Check DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT (scenario: roles.scheduler_host) and that the "
           "scheduler "
           "is running; raise ps.connect_timeout if it starts late.";
    rt_.fail(out.str());
  });
}

void PsNode::send_to(NodeId to, Command command, const MessageHeader& fields, Payload payload) {
  Message message{fields, std::move(payload)};
  message.header.recipient = to;
  message.header.command = command;
  rt_.send(std::move(message));
}

Message reply_message(const Message& request, Payload payload) {
  Message message{request.header, std::move(payload)};
  message.header.recipient = request.header.sender;
  message.header.is_response = true;
  return message;
}

void PsNode::reply(const Message& request, Payload payload) {
  rt_.send(reply_message(request, std::move(payload)));
}

void PsNode::on_message(Message message) {
  if (phase_ == Phase::kStopped) return;
  const auto& h = message.header;
  switch (h.command) {
    case Command::kNodeTable:
      on_node_table(message);
      return;
    case Command::kBarrier:
      if (h.is_response && phase_ == Phase::kBarrier) {
        phase_ = Phase::kRunning;
        on_ready();
        auto early = std::move(early_);
        for (auto& m : early) on_app_message(std::move(m));
      }
      return;
    case Command::kShutdown:
      if (!h.is_response) {
        on_shutdown();
        reply(message);
        phase_ = Phase::kStopped;
        rt_.stop();
      }
      return;
    case Command::kPush:
    case Command::kPull:
    case Command::kPushPull:
    case Command::kLbDecision:
      if (phase_ == Phase::kBarrier) {
        early_.push_back(std::move(message));
        return;
      }
      if (phase_ != Phase::kRunning) {
        rt_.log("dropping " + std::string(command_name(h.command)) + " from node " +
                std::to_string(h.sender) + " received before this node had the node table");
        return;
      }
      on_app_message(std::move(message));
      return;
    default:
      rt_.log("ignoring unexpected " + std::string(command_name(h.command)) + " from node " +
              std::to_string(h.sender));
  }
}

void PsNode::on_node_table(const Message& message) {
  if (phase_ != Phase::kRegistering) return;
  std::string error;
  auto table = decode_node_table(message.payload, error);
  if (!table) {
    rt_.fail("malformed node table from the scheduler: " + error);
    return;
  }
  if (connect_timer_) rt_.cancel_timer(*connect_timer_);
  connect_timer_.reset();
  table_ = std::move(*table);
  for (const auto& info : table_) {
    if (info.address == rt_.local_address()) rt_.set_self(info.id);
    rt_.connect(info.id, info.address);
  }
  if (rt_.self() == kNoNode) {
    rt_.fail("the scheduler's node table does not list this node's address " + rt_.local_address());
    return;
  }
  phase_ = Phase::kBarrier;
  MessageHeader fields;
  fields.key = kAllGroups;
  send_to(kSchedulerId, Command::kBarrier, fields);
  rt_.start_timer(scenario_.ps.heartbeat_interval_s, [this] { heartbeat(); });
}

void PsNode::heartbeat() {
  if (phase_ == Phase::kStopped) return;
  send_to(kSchedulerId, Command::kHeartbeat, MessageHeader{});
  rt_.start_timer(scenario_.ps.heartbeat_interval_s, [this] { heartbeat(); });
}

void PsNode::report_start_decisions(const DecisionBook* book) {
  if (book)
    for (std::uint32_t i = 0; i < kDecisionLag; ++i) observer_.lb_decision(rt_.self(), *book->find(i));
}

const LbDecision* PsNode::take_decision(DecisionBook* book, const Message& message) {
  std::string error;
  const LbDecision* decision = book ? book->accept(message.payload, error) : nullptr;
  if (!decision) {
    rt_.fail(std::string(role_name(role_)) + " " + std::to_string(rank_) +
             ": bad load-balancing decision from node " + std::to_string(message.header.sender) +
             (book ? ": " + error : ": ps.balancing is not \"lb\" here"));
    return nullptr;
  }
  observer_.lb_decision(rt_.self(), *decision);
  return decision;
}

std::string PsNode::describe_state() const {
  switch (phase_) {
    case Phase::kRegistering:
      return "registering with the scheduler at " + scheduler_address_;
    case Phase::kBarrier:
      return "waiting for the start barrier";
    case Phase::kRunning:
      return describe_app_state();
    case Phase::kStopped:
      return "stopped";
  }
  return "";
}

}  // namespace pstwin
