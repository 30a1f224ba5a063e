// The event loops of a process's nodes, run by shared threads instead of one thread each. A node's
// loop is a sequence of turns (I/O, posted events, timers, sends); any pool thread may run a
// node's next turn, never two at once. When a worker's turn sends to a server of the same process,
// the thread that sent finds the server's socket ready and runs the server's turn itself: the
// message crosses no thread, so no wake-up sits on the round trip. Each wake-up is 25-35 us on a
// paravirtualised VM whose idle vCPUs halt, against about 1.4 us of pstwin work per message. While
// several nodes have work the pool's threads run them in parallel, as one thread per node would:
// run_local gives the pool a thread per CPU, at most one per node.
//
// How: every member offers one pollable descriptor (LoopRuntime::pool_fd(): readable when its
// transport has I/O, a post or a timer due), registered here with EPOLLONESHOT, so an epoll_wait
// hands a ready member to exactly one thread; that thread re-arms it after the turn.
#pragma once

#include <thread>
#include <vector>

#include "realnet/file_descriptor.hpp"

namespace pstwin::realnet {

class LoopRuntime;

class LoopPool {
 public:
  // `threads`: at most this many members run at once (clamped to 1..64).
  explicit LoopPool(int threads);
  // Every member must have finished (LoopRuntime::halt()) first.
  ~LoopPool();
  LoopPool(const LoopPool&) = delete;
  LoopPool& operator=(const LoopPool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }
  // Starts running `member`'s turns (LoopRuntime::start() calls it). Any thread.
  void add(LoopRuntime& member);

 private:
  void run();

  FileDescriptor epoll_;
  FileDescriptor stop_;  // eventfd, never drained: every thread sees it once the destructor wrote it
  std::vector<std::jthread> threads_;
};

}  // namespace pstwin::realnet
