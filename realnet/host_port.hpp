// "HOST:PORT" addresses as nodes bind and advertise them, split for vans that connect by host and
// port themselves (epoll, UCX).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pstwin::realnet {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};

// "HOST:PORT" (PORT "*" = 0 when `any_port`); nullopt if malformed.
std::optional<HostPort> split_host_port(std::string_view text, bool any_port);

}  // namespace pstwin::realnet
