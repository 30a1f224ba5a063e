#include "sim/wakeup.hpp"

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>

namespace pstwin::sim {
namespace s4u = simgrid::s4u;

Wakeup::Wakeup() : semaphore_(s4u::Semaphore::create(0)) {}

void Wakeup::begin() {
  s4u::this_actor::yield();
}

void Wakeup::end() {
  s4u::this_actor::yield();
}

void Wakeup::wait() {
  waiting_ = true;
  semaphore_->acquire();
}

bool Wakeup::wait_until(double deadline) {
  waiting_ = true;
  if (!semaphore_->acquire_timeout(deadline - s4u::Engine::get_clock())) return true;
  // Timed out. Where a condition variable's wait took the mutex again, one simcall answered at once:
  // the token of a notify that ran after the timeout (it found the loop waiting, not yet run), or a
  // yield. A notify of this sub-round is handled before this simcall: it ran before the loop.
  if (waiting_) {
    waiting_ = false;
    s4u::this_actor::yield();
  } else {
    semaphore_->acquire();
  }
  return false;
}

void Wakeup::notify() {
  if (waiting_) {
    waiting_ = false;
    semaphore_->release();
  } else {
    s4u::this_actor::yield();
  }
}

}  // namespace pstwin::sim
