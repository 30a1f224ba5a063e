// The control plane every server and worker shares (ps-lite's Postoffice): register with the
// scheduler, learn the node table, pass the start barrier, send heartbeats, obey shutdown.
// Traffic only starts after the barrier, which closes ps-lite's startup race (a push reaching a
// server before its KV app exists).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/runtime.hpp"
#include "ps/balance.hpp"
#include "ps/control.hpp"
#include "ps/observer.hpp"
#include "ps/role_options.hpp"

namespace pstwin {

// The response to `request`: its header, addressed back to the sender.
Message reply_message(const Message& request, Payload payload = {});

// Where a server, worker or validator runs: its runtime, what it reports to, the scheduler to
// register with, and the control plane's settings.
struct NodeContext {
  Runtime& runtime;
  RunObserver& observer;
  std::string scheduler_address;
  ControlOptions control;
};

class PsNode : public Node {
 public:
  PsNode(NodeContext context, Role role, int rank);

  void start() final;
  void on_message(Message message) final;
  std::string describe_state() const override;
  // Tells the scheduler why this node stops (kFatal), so every other node learns it at once instead
  // of after ps.heartbeat_timeout; not when the scheduler itself ended the job or is gone.
  void on_failing(std::string_view why) final;

 protected:
  virtual void on_ready() = 0;                       // after the start barrier
  virtual void on_app_message(Message message) = 0;  // push, pull, app messages and their responses
  // A barrier after the start barrier released `group` (one this node asked for with kBarrier).
  virtual void on_barrier_released(int /*group*/) {}
  virtual void on_shutdown() {}
  // ps.on_worker_loss = "continue": the scheduler declared worker `rank` dead; the job goes on.
  virtual void on_worker_lost(int /*rank*/) {}
  virtual std::string describe_app_state() const = 0;

  void send_to(NodeId to, Command command, const MessageHeader& fields, Payload payload = {});
  void reply(const Message& request, Payload payload = {});
  // ps.balancing = "lb" (`book` null otherwise): report the decisions every node derives itself; take
  // up one from the scheduler and report it, or fail the run naming what is wrong (null).
  void report_start_decisions(const DecisionBook* book);
  const LbDecision* take_decision(DecisionBook* book, const Message& message);

  Runtime& rt_;
  RunObserver& observer_;
  const Role role_;
  const int rank_;

 private:
  void on_node_table(const Message& message);
  void on_registration_answer(const Message& message);
  void heartbeat();
  std::string who() const;  // "worker 1 on h3"

  std::string scheduler_address_;
  const ControlOptions control_;
  std::string job_digest_;       // of our scenario's job_fields: the scheduler checks it at registration
  bool registered_ = false;      // the scheduler accepted our registration (we wait for the node table)
  Seconds scheduler_heard_ = 0;  // when the scheduler last sent us anything (a heartbeat reply at least)
  bool scheduler_gone_ = false;  // it ended the job or went silent: no kFatal goes to it
  std::optional<TimerId> connect_timer_;
  // Pushes and pulls that overtook our own barrier release (they travel on other connections):
  // kept and handled once the barrier releases us, never dropped.
  std::vector<Message> early_;
  enum class Phase { kRegistering, kBarrier, kRunning, kStopped } phase_ = Phase::kRegistering;
};

}  // namespace pstwin
