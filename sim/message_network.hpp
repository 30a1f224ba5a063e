// The interface of pstwin's own network models (sim.network_model = "flow" or "fifo"): they carry
// bulk messages between hosts in simulated time, in place of SimGrid's solver.
#pragma once

#include <functional>
#include <limits>

#include <simgrid/s4u.hpp>

namespace pstwin::sim {

class MessageNetwork {
 public:
  static constexpr double kUnbounded = std::numeric_limits<double>::infinity();
  virtual ~MessageNetwork() = default;
  // Sends `bytes` from `from` to `to` at most at `max_rate` bytes/s (a paced connection). `sent` runs
  // when the sender's NIC has put the last byte on the wire (the connection may take its next
  // message), `done` when the last byte arrived. A model without queues runs `done` and nothing else:
  // see separates_sent().
  virtual void start(simgrid::s4u::Host* from, simgrid::s4u::Host* to, double bytes,
                     std::function<void()> sent, std::function<void()> done,
                     double max_rate = kUnbounded) = 0;
  // Runs `fire` `delay` seconds from now (a latency-only message, a modelled delay).
  virtual void after(double delay, std::function<void()> fire) = 0;
  // True: `sent` and `done` are separate instants (messages wait in queues between them).
  virtual bool separates_sent() const = 0;
};

}  // namespace pstwin::sim
