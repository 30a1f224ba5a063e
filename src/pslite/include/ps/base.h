// Keys and node groups as ps-lite defines them: a node id is a group (scheduler 1, servers 2, workers 4,
// or their sum) or one node (scheduler 1, server rank r 8 + 2r, worker rank r 9 + 2r).
#ifndef PS_BASE_H_
#define PS_BASE_H_

#include <cstdint>
#include <limits>

#include "ps/internal/utils.h"

namespace ps {

using Key = std::uint64_t;
static const Key kMaxKey = std::numeric_limits<Key>::max();
static const int kScheduler = 1;
static const int kServerGroup = 2;
static const int kWorkerGroup = 4;

}  // namespace ps

#endif  // PS_BASE_H_
