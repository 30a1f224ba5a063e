#include "sim/message_network.hpp"

#include <algorithm>
#include <cmath>

#include "sim/platform.hpp"

namespace pstwin::sim {
namespace s4u = simgrid::s4u;

namespace {
constexpr double kTimeEpsilon = 1e-9;  // events this close to the clock are due: SimGrid's precision
}  // namespace

DaemonNetwork::DaemonNetwork() {
  // A simcall, as creating the daemon's condition variable was: built on an actor, it yields as
  // often, so runs keep their order of events.
  s4u::this_actor::yield();
}

void DaemonNetwork::start_daemon(const std::string& name, s4u::Host* home) {
  create_actor(name, home, [this] { run(); })->daemonize();
}

void DaemonNetwork::after(double delay, std::function<void()> fire) {
  timers_.push_back({s4u::Engine::get_clock() + delay, next_sequence_++, std::move(fire)});
  std::push_heap(timers_.begin(), timers_.end(), later);
  wake();
}

void DaemonNetwork::wake() {
  wakeup_.notify();
}

void DaemonNetwork::run() {
  wakeup_.begin();
  while (true) {
    const double now = s4u::Engine::get_clock();
    // A callback may start a message or a timer that is due at once: repeat until quiet.
    for (bool busy = true; busy;) {
      busy = false;
      while (!timers_.empty() && timers_.front().time <= now + kTimeEpsilon) {
        std::pop_heap(timers_.begin(), timers_.end(), later);
        auto due = std::move(timers_.back().fire);
        timers_.pop_back();
        busy = true;
        due();
      }
      if (next_model_event() <= now + kTimeEpsilon) {
        busy = true;
        run_model_until(now);
      }
    }
    double next = next_model_event();
    if (!timers_.empty()) next = std::min(next, timers_.front().time);
    if (std::isinf(next))
      wakeup_.wait();
    else
      wakeup_.wait_until(next);
  }
}

}  // namespace pstwin::sim
