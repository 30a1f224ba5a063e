#include "ps/ps_node.hpp"

#include <iomanip>
#include <map>
#include <sstream>
#include <vector>

#include "ps/ids.hpp"

namespace pstwin {

PsNode::PsNode(NodeContext context, Role role, int rank)
    : rt_(context.runtime),
      observer_(context.observer),
      role_(role),
      rank_(rank),
      scheduler_address_(std::move(context.scheduler_address)),
      control_(std::move(context.control)) {}

void PsNode::start() {
  rt_.connect(kSchedulerId, scheduler_address_);
  job_digest_ = job_digest(*control_.job_fields);
  const Registration me{{kNoNode, role_, rank_, rt_.local_address(), rt_.host_name()}, job_digest_};
  MessageHeader fields;
  send_to(kSchedulerId, Command::kRegister, fields, encode_registration(me));
  const Seconds timeout = control_.connect_timeout_s;
  connect_timer_ = rt_.start_timer(timeout, [this, timeout] {
    std::ostringstream out;
    if (registered_)
      // The scheduler answered: it is the job that is incomplete, not the address that is wrong.
      out << who() << " registered with the scheduler at " << scheduler_address_
          << " but had no node table after " << timeout
          << " s: the job is still missing nodes. Start every node DMLC_NUM_SERVER and DMLC_NUM_WORKER "
             "count, each with the same scenario (the scheduler's log names any registration it refused); "
             "raise ps.connect_timeout if they start late.";
    else
      out << who() << " cannot reach the scheduler at " << scheduler_address_ << ": no node table after "
          << timeout
          << " s. Check DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT (scenario: roles.scheduler_host) and that the "
             "scheduler is running; raise ps.connect_timeout if it starts late.";
    rt_.fail(out.str());
  });
}

std::string PsNode::who() const {
  return std::string(role_name(role_)) + " " + std::to_string(rank_) + " on " + rt_.host_name();
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
  const bool from_scheduler = h.sender == kSchedulerId;
  if (from_scheduler) scheduler_heard_ = rt_.now();
  switch (h.command) {
    case Command::kRegister:
    case Command::kNodeTable:
    case Command::kBarrier:
    case Command::kShutdown:
    case Command::kFatal:
    case Command::kWorkerLost:
    case Command::kLbDecision:
      // The control plane is the scheduler's: these start, hold, end, shape or fail the job, so a
      // message from anyone else (a misdirected or forged frame) must not.
      if (!from_scheduler) {
        rt_.log("ignoring " + std::string(command_name(h.command)) + " from node " +
                std::to_string(h.sender) + ": only the scheduler (node 1) sends it");
        return;
      }
      break;
    default:
      break;
  }
  switch (h.command) {
    case Command::kRegister:
      if (h.is_response && phase_ == Phase::kRegistering) on_registration_answer(message);
      return;
    case Command::kNodeTable:
      on_node_table(message);
      return;
    case Command::kBarrier:
      if (h.is_response && phase_ == Phase::kBarrier) {
        phase_ = Phase::kRunning;
        on_ready();
        auto early = std::move(early_);
        for (auto& m : early) on_app_message(std::move(m));
      } else if (h.is_response && phase_ == Phase::kRunning) {
        on_barrier_released(static_cast<int>(h.key));
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
    case Command::kHeartbeat:
      return;  // the scheduler's reply: it is alive (noted above)
    case Command::kWorkerLost:
      if (role_of(static_cast<NodeId>(h.key)) != Role::kWorker) {
        rt_.log("ignoring worker_lost for node " + std::to_string(h.key) + ", which is not a worker");
        return;
      }
      rt_.log("worker " + std::to_string(rank_of(static_cast<NodeId>(h.key))) +
              " was declared dead; going on without it (ps.on_worker_loss = \"continue\")");
      observer_.worker_lost(rank_of(static_cast<NodeId>(h.key)),
                            rt_.now());  // this node's checker sums what it applied
      on_worker_lost(rank_of(static_cast<NodeId>(h.key)));
      return;
    case Command::kFatal:
      // The scheduler names the node that failed; it needs no notice back.
      scheduler_gone_ = true;
      rt_.fail("the job ended: " + decode_text(message.payload));
      return;
    case Command::kPush:
    case Command::kPull:
    case Command::kPushPull:
    case Command::kLbDecision:
    case Command::kApp:
    case Command::kLocalReduce:
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

void PsNode::on_registration_answer(const Message& message) {
  if (message.header.key == kRegistrationAccepted) {
    registered_ = true;
    return;
  }
  std::string error;
  const auto refusal = decode_refusal(message.payload, error);
  if (!refusal) {
    rt_.fail("the scheduler refused this node's registration; its refusal is malformed: " + error);
    return;
  }
  // Name the fields that differ, as both sides have them, so the fix is plain.
  std::map<std::string, std::string> theirs(refusal->job_fields.begin(), refusal->job_fields.end());
  std::vector<std::string> differ;
  for (const auto& [path, value] : *control_.job_fields) {
    const auto it = theirs.find(path);
    if (it == theirs.end())
      differ.push_back(path + " = " + value + " here, not in the job's scenario");
    else if (it->second != value)
      differ.push_back(path + " = " + value + " here, " + it->second + " in the job");
    if (it != theirs.end()) theirs.erase(it);
  }
  for (const auto& [path, value] : theirs)
    differ.push_back(path + " = " + value + " in the job, not in this node's scenario");
  std::ostringstream out;
  out << "the scheduler refused the registration of " << who() << ": this node's scenario digest "
      << job_digest_ << " differs from the job's " << refusal->job_digest;
  if (!differ.empty()) {
    out << "; fields that differ:";
    constexpr std::size_t kShown = 8;
    for (std::size_t i = 0; i < differ.size() && i < kShown; ++i) out << (i ? "; " : " ") << differ[i];
    if (differ.size() > kShown) out << "; and " << differ.size() - kShown << " more";
  }
  out << ". Start every node with the same scenario file, --set overrides and DMLC_NUM_* / BYTEPS_* "
         "environment.";
  scheduler_gone_ = true;  // it knows
  rt_.fail_configuration(out.str());
}

void PsNode::on_failing(std::string_view why) {
  if (scheduler_gone_) return;
  MessageHeader fields;
  send_to(kSchedulerId, Command::kFatal, fields, encode_text(why));
}

void PsNode::on_node_table(const Message& message) {
  if (phase_ != Phase::kRegistering) return;
  std::string error;
  const auto table = decode_node_table_views(message.payload, error);
  if (!table) {
    rt_.fail("malformed node table from the scheduler: " + error);
    return;
  }
  if (connect_timer_) rt_.cancel_timer(*connect_timer_);
  connect_timer_.reset();
  // Not kept: the runtime keeps the addresses, and a simulation of N nodes would hold N tables of N.
  const std::string own_address = rt_.local_address();
  for (const auto& info : *table) {
    if (info.address == own_address) rt_.set_self(info.id);
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
  scheduler_heard_ = rt_.now();
  rt_.start_timer(control_.heartbeat_interval_s, [this] { heartbeat(); });
}

void PsNode::heartbeat() {
  if (phase_ == Phase::kStopped) return;
  // The scheduler answers every heartbeat: silence this long means it died or the way to it did, and
  // nobody is left to end the job (ps-lite's nodes wait forever).
  const Seconds silent = rt_.now() - scheduler_heard_;
  if (silent > control_.heartbeat_timeout_s) {
    std::ostringstream out;
    out << "the scheduler (node 1 at " << scheduler_address_ << ") sent nothing for " << std::fixed
        << std::setprecision(1) << silent << " s (ps.heartbeat_timeout = " << std::defaultfloat
        << std::setprecision(6) << control_.heartbeat_timeout_s << " s): presumed dead";
    scheduler_gone_ = true;
    rt_.fail(out.str());
    return;
  }
  send_to(kSchedulerId, Command::kHeartbeat, MessageHeader{});
  rt_.start_timer(control_.heartbeat_interval_s, [this] { heartbeat(); });
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
