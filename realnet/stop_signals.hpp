// SIGINT and SIGTERM as requests to stop a `pstwin node`: blocked in the thread that constructs
// this and in every thread it starts afterwards (threads inherit the mask), so no event-loop, lane
// or ZeroMQ thread is ever interrupted; the waiting thread takes them with take(). The node then
// stops like a failed one: threads joined, sockets closed, its staging objects unlinked (a killed
// process would leave them in /dev/shm).
#pragma once

#include <signal.h>

namespace pstwin::realnet {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();  // restores the mask; a signal that arrives after take() still ends the process
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The pending SIGINT or SIGTERM, consumed, or 0 if none: never waits.
  int take();

 private:
  sigset_t stop_set_{};
  sigset_t previous_{};
};

}  // namespace pstwin::realnet
