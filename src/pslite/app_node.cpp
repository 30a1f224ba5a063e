#include "pslite/app_node.hpp"

#include "ps/ids.hpp"
#include "pslite/wire.hpp"

namespace pstwin::pslite {

void deliver_app_frame(Runtime& runtime, const Message& frame, AppEvents& events) {
  std::string error;
  auto message = from_wire(frame, error);
  if (!message) {
    runtime.log("dropping a malformed app message from node " + std::to_string(frame.header.sender) + ": " +
                error);
    return;
  }
  events.received(std::move(*message));
}

AppNode::AppNode(NodeContext context, Role role, int rank, AppEvents& events)
    : PsNode(std::move(context), role, rank), events_(events) {}

void AppNode::request_barrier(int group) {
  MessageHeader fields;
  fields.key = static_cast<std::uint64_t>(group);
  send_to(kSchedulerId, Command::kBarrier, fields);
}

void AppNode::announce_done() {
  send_to(kSchedulerId, Command::kWorkerDone, MessageHeader{});
}

void AppNode::on_ready() {
  events_.started(rt_.self());
}

void AppNode::on_app_message(Message message) {
  if (message.header.command != Command::kApp) {
    rt_.log("ignoring " + std::string(command_name(message.header.command)) + " from node " +
            std::to_string(message.header.sender) + ": a ps-lite application's node takes app messages only");
    return;
  }
  deliver_app_frame(rt_, message, events_);
}

AppScheduler::AppScheduler(Runtime& runtime, std::unique_ptr<Scheduler> scheduler, AppEvents& events)
    : rt_(runtime), scheduler_(std::move(scheduler)), events_(events) {}

void AppScheduler::local_finalized() {
  finalized_ = true;
  auto held = std::move(held_done_);
  for (auto& message : held) scheduler_->on_message(std::move(message));
}

void AppScheduler::on_message(Message message) {
  if (message.header.command == Command::kApp) {
    deliver_app_frame(rt_, message, events_);
    return;
  }
  if (message.header.command == Command::kWorkerDone && !finalized_) {
    held_done_.push_back(std::move(message));
    return;
  }
  scheduler_->on_message(std::move(message));
}

std::string AppScheduler::describe_state() const {
  std::string state = scheduler_->describe_state();
  if (!finalized_) state += "; the scheduler's application has not finalized";
  return state;
}

}  // namespace pstwin::pslite
