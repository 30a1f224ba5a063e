#pragma once
// [cpu] shared_cores: the cores on which the `net` lanes of several simulated nodes run. A real
// loopback or namespace cluster puts every node process on the same few cores, so one node's
// copies wait while another's hold every core; one lane per node alone would run them all at once.

#include <cstddef>
#include <map>
#include <vector>

#include "core/types.hpp"

namespace pstwin::sim {

class SharedCores {
 public:
  explicit SharedCores(int cores);

  // Books `cost` seconds on one core, starting at `earliest` or at the first later instant a core
  // has that much free time, and returns the start. Non-preemptive, in the order charged (the
  // simulator's event order, so deterministic); a gap before a booking is filled when a charge fits
  // in it, and a tie goes to the lowest core. Bookings that ended before `now` are forgotten.
  Seconds book(Seconds now, Seconds earliest, Seconds cost);
  int cores() const { return static_cast<int>(busy_.size()); }

 private:
  // Start of the first gap of `cost` seconds on `core` at or after `earliest`.
  Seconds fit(std::size_t core, Seconds earliest, Seconds cost) const;
  std::vector<std::map<Seconds, Seconds>> busy_;  // per core: booking start -> end, disjoint
};

}  // namespace pstwin::sim
