// One-shot timers of a node's event loop, ordered by (deadline, id) so timers due at the same
// time fire in the order they were started. Backends own the waiting; this owns the order.
#pragma once

#include <functional>
#include <map>
#include <optional>

#include "core/runtime.hpp"

namespace pstwin {

class TimerQueue {
 public:
  TimerId add(Seconds deadline, std::function<void()> fire) {
    const TimerId id = next_id_++;
    timers_.emplace(std::make_pair(deadline, id), std::move(fire));
    deadlines_[id] = deadline;
    return id;
  }
  void cancel(TimerId id) {
    auto it = deadlines_.find(id);
    if (it == deadlines_.end()) return;
    timers_.erase({it->second, id});
    deadlines_.erase(it);
  }
  bool empty() const { return timers_.empty(); }
  Seconds next_deadline() const { return timers_.begin()->first.first; }
  // Removes and returns the first timer if it is due at `now`.
  std::optional<std::function<void()>> pop_due(Seconds now) {
    if (timers_.empty() || timers_.begin()->first.first > now) return std::nullopt;
    auto first = timers_.begin();
    auto fire = std::move(first->second);
    deadlines_.erase(first->first.second);
    timers_.erase(first);
    return fire;
  }

 private:
  std::map<std::pair<Seconds, TimerId>, std::function<void()>> timers_;
  std::map<TimerId, Seconds> deadlines_;
  TimerId next_id_ = 1;
};

}  // namespace pstwin
