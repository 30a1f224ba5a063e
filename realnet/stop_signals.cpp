#include "realnet/stop_signals.hpp"

#include <pthread.h>

#include <ctime>

namespace pstwin::realnet {

StopSignals::StopSignals() {
  ::sigemptyset(&stop_set_);
  ::sigaddset(&stop_set_, SIGINT);
  ::sigaddset(&stop_set_, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &stop_set_, &previous_);
}

StopSignals::~StopSignals() {
  ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

int StopSignals::take() {
  const timespec now{};
  const int sig = ::sigtimedwait(&stop_set_, nullptr, &now);
  return sig > 0 ? sig : 0;
}

}  // namespace pstwin::realnet
