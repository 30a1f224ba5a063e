// How an event loop's actor (a node's, the flow daemon's) waits for work and is woken, with the
// same simcalls, so the same order of actors at every simulated instant, as a wait on an s4u
// condition variable under a mutex the loop holds while it runs, and with less of SimGrid's work.
#pragma once

#include <simgrid/s4u/Semaphore.hpp>

namespace pstwin::sim {

// SimGrid answers the simcalls of one sub-round in the order the actors ran. A notify that finds
// the loop waiting puts the loop in the next run list just ahead of the notifier (the loop takes
// its free mutex inside the notify's simcall); a notify that finds none is a plain yield; a timed
// wait that times out answers at the same place among the instant's wake-ups (a CPU sleep action of
// the same length, made and dropped at the same simcalls), then the loop's mutex lock is one more
// simcall answered at once. A semaphore of no tokens released only while the loop waits does the
// same with one allocation per wait instead of a wait record, a mutex acquisition and their list
// entries (docs/PERFORMANCE.md, "Simulator scale: where the time goes").
class Wakeup {
 public:
  Wakeup();
  // The loop's first simcall, where it took its mutex: a yield.
  void begin();
  // Until notify().
  void wait();
  // Until notify() or `deadline` (later than now). False: timed out.
  bool wait_until(double deadline);
  // From any actor: one simcall, as ConditionVariable::notify_one is.
  void notify();
  // The loop's last simcall, where it released its mutex: a yield.
  void end();

 private:
  simgrid::s4u::SemaphorePtr semaphore_;
  // The loop waits and no notify has released it yet. A notify clears it before it releases, so
  // another in the same sub-round yields instead; a timed-out loop that finds it cleared takes the
  // token that notify left.
  bool waiting_ = false;
};

}  // namespace pstwin::sim
