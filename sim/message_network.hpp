// The interface of pstwin's own network models (sim.network_model = "flow" or "fifo"): they carry
// bulk messages between hosts in simulated time, in place of SimGrid's solver.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <simgrid/s4u.hpp>

#include "sim/wakeup.hpp"

namespace pstwin::sim {

class MessageNetwork {
 public:
  static constexpr double kUnbounded = std::numeric_limits<double>::infinity();
  virtual ~MessageNetwork() = default;
  // Sends `bytes` from `from` to `to` at most at `max_rate` bytes/s (a paced connection). `sent` runs
  // when the sender has handed the message on (the connection may take its next one: the FIFO
  // model's host queue took it whole, or its NIC put the last byte on the wire), `done` when the
  // last byte arrived. A model without queues runs `done` and nothing else:
  // see separates_sent(). `latency_paid` (seconds): what of the route's latency the caller pays itself,
  // not before the bytes move (sim.pipeline_messages: the stream delivers a latency after `done`, so a
  // connection's next message follows this one's bytes as on a TCP stream); models with queues
  // pipeline a connection's messages themselves and ignore it.
  virtual void start(simgrid::s4u::Host* from, simgrid::s4u::Host* to, double bytes,
                     std::function<void()> sent, std::function<void()> done, double max_rate = kUnbounded,
                     double latency_paid = 0) = 0;
  // Runs `fire` `delay` seconds from now (a latency-only message, a modelled delay).
  virtual void after(double delay, std::function<void()> fire) = 0;
  // True: `sent` and `done` are separate instants (messages wait in queues between them).
  virtual bool separates_sent() const = 0;
};

// What pstwin's own models share (FlowNetwork, FifoNetwork): one daemon actor that runs the timers
// due now in (time, call order) order, then the model's own events due now, again until nothing more
// is due, then sleeps until the next. Callbacks run on that actor and may start messages and timers,
// but must not block.
class DaemonNetwork : public MessageNetwork {
 public:
  void after(double delay, std::function<void()> fire) final;

 protected:
  DaemonNetwork();
  void start_daemon(const std::string& name, simgrid::s4u::Host* home);  // a constructor's last step
  void wake();                                                           // the model has a new event
  virtual double next_model_event() const = 0;                           // infinity: none
  virtual void run_model_until(double now) = 0;                          // everything due at or before `now`

 private:
  void run();
  struct Timer {
    double time;
    std::uint64_t sequence;  // ties at one time fire in the order added
    std::function<void()> fire;
  };
  // A min-heap by (time, sequence): one timer per header-only message or flow start, so a tree
  // node per timer cost an allocation and a rebalancing each.
  static bool later(const Timer& a, const Timer& b) {
    return a.time != b.time ? a.time > b.time : a.sequence > b.sequence;
  }
  std::vector<Timer> timers_;
  std::uint64_t next_sequence_ = 0;
  Wakeup wakeup_;
};

}  // namespace pstwin::sim
