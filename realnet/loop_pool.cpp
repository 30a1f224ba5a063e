#include "realnet/loop_pool.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "realnet/loop_runtime.hpp"

namespace pstwin::realnet {

LoopPool::LoopPool(int threads)
    : epoll_(epoll_create1(EPOLL_CLOEXEC)), stop_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (epoll_.get() < 0 || stop_.get() < 0)
    throw std::runtime_error(std::string("cannot create the loop pool's epoll set: ") + std::strerror(errno));
  epoll_event event{};
  event.events = EPOLLIN;  // level-triggered and never drained: wakes every thread, each once
  event.data.ptr = nullptr;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, stop_.get(), &event) != 0)
    throw std::runtime_error(std::string("cannot watch the loop pool's stop descriptor: ") +
                             std::strerror(errno));
  const int count = std::clamp(threads, 1, 64);
  threads_.reserve(static_cast<std::size_t>(count));
  for (int t = 0; t < count; ++t) threads_.emplace_back([this] { run(); });
}

LoopPool::~LoopPool() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(stop_.get(), &one, sizeof one);
  threads_.clear();  // joins
}

void LoopPool::add(LoopRuntime& member) {
  epoll_event event{};
  event.events = EPOLLIN | EPOLLONESHOT;
  event.data.ptr = &member;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, member.pool_fd(), &event) != 0)
    throw std::runtime_error("cannot add " + member.label() + " to the loop pool: " + std::strerror(errno));
}

void LoopPool::run() {
  for (;;) {
    epoll_event event{};
    const int ready = epoll_wait(epoll_.get(), &event, 1, -1);
    if (ready <= 0) continue;  // EINTR
    if (event.data.ptr == nullptr) return;
    auto& member = *static_cast<LoopRuntime*>(event.data.ptr);
    if (member.pool_turn()) {
      // Level-triggered: a member still ready (more input, a post) is handed out again at once.
      event.events = EPOLLIN | EPOLLONESHOT;
      if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, member.pool_fd(), &event) == 0) continue;
      member.pool_abandon(std::string("the loop pool cannot watch it any more: ") + std::strerror(errno));
    }
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, member.pool_fd(), nullptr);
    member.pool_finished();
  }
}

}  // namespace pstwin::realnet
