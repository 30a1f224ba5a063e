// The protocol side of a ps-lite application's node: a server or worker is a PsNode (registration,
// node table, start barrier, heartbeats, shutdown) whose app messages go to the application; the
// scheduler is pstwin's Scheduler with the application's messages taken out before it, and the end of
// the job held until the scheduler's own application finalized (ps-lite's Finalize is a barrier the
// scheduler is part of).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/runtime.hpp"
#include "ps/internal/message.h"
#include "ps/ps_node.hpp"
#include "ps/scheduler.hpp"

namespace pstwin::pslite {

// What the node tells the application, on the node's event loop.
class AppEvents {
 public:
  virtual ~AppEvents() = default;
  virtual void started(NodeId self) = 0;  // the start barrier released this node
  virtual void barrier_released(int group) = 0;
  virtual void received(ps::Message message) = 0;
};

class AppNode final : public PsNode {
 public:
  AppNode(NodeContext context, Role role, int rank, AppEvents& events);
  // On the event loop: ask the scheduler for a barrier of `group`; tell it this worker is done.
  void request_barrier(int group);
  void announce_done();
  // On the event loop: sends an app frame through the node's own runtime (behind its Resender, if any).
  void send_app(Message frame) { rt_.send(std::move(frame)); }

 private:
  void on_ready() override;
  void on_app_message(Message message) override;
  void on_barrier_released(int group) override { events_.barrier_released(group); }
  std::string describe_app_state() const override { return "running a ps-lite application"; }

  AppEvents& events_;
};

class AppScheduler final : public Node {
 public:
  AppScheduler(Runtime& runtime, std::unique_ptr<Scheduler> scheduler, AppEvents& events);
  // On the event loop: the scheduler's application finalized; the job may end once the workers are done.
  void local_finalized();
  // On the event loop: sends an app frame through the node's own runtime (behind its Resender, if any).
  void send_app(Message frame) { rt_.send(std::move(frame)); }

  void start() override { scheduler_->start(); }
  void on_message(Message message) override;
  std::string describe_state() const override;
  void on_failing(std::string_view why) override { scheduler_->on_failing(why); }

 private:
  Runtime& rt_;
  std::unique_ptr<Scheduler> scheduler_;
  AppEvents& events_;
  bool finalized_ = false;
  std::vector<Message> held_done_;  // kWorkerDone before the scheduler's application finalized
};

// Hands a kApp frame to the application, or logs why it was dropped.
void deliver_app_frame(Runtime& runtime, const Message& frame, AppEvents& events);

}  // namespace pstwin::pslite
