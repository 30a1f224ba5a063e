// An owned eventfd: how other threads cut a van's wait short (the node's event loop sleeps in poll(2)
// on it beside the van's own descriptors).
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace pstwin::realnet {

class EventFd {
 public:
  EventFd() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  }
  ~EventFd() { close(fd_); }
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  int fd() const { return fd_; }
  void signal() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = write(fd_, &one, sizeof one);  // counter saturation is harmless
  }
  void drain() const {
    std::uint64_t value = 0;
    [[maybe_unused]] const auto n = read(fd_, &value, sizeof value);
  }

 private:
  int fd_;
};

}  // namespace pstwin::realnet
