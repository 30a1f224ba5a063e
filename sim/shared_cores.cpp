#include "sim/shared_cores.hpp"

#include <algorithm>
#include <limits>

namespace pstwin::sim {

SharedCores::SharedCores(int cores) : busy_(static_cast<std::size_t>(std::max(cores, 1))) {}

Seconds SharedCores::fit(std::size_t core, Seconds earliest, Seconds cost) const {
  const auto& booked = busy_[core];
  Seconds start = earliest;
  // The booking that may still run at `earliest` is the last one starting at or before it.
  auto it = booked.upper_bound(start);
  if (it != booked.begin()) {
    const auto before = std::prev(it);
    start = std::max(start, before->second);
  }
  for (; it != booked.end(); ++it) {
    if (start + cost <= it->first) break;  // fits in the gap before this booking
    start = std::max(start, it->second);
  }
  return start;
}

Seconds SharedCores::book(Seconds now, Seconds earliest, Seconds cost) {
  Seconds best = std::numeric_limits<Seconds>::infinity();
  std::size_t best_core = 0;
  for (std::size_t core = 0; core < busy_.size(); ++core) {
    auto& booked = busy_[core];
    while (!booked.empty() && booked.begin()->second < now) booked.erase(booked.begin());
    const Seconds start = fit(core, earliest, cost);
    if (start < best) {
      best = start;
      best_core = core;
    }
  }
  if (cost > 0) busy_[best_core].emplace(best, best + cost);
  return best;
}

}  // namespace pstwin::sim
