#include "realnet/host_port.hpp"

#include <charconv>

namespace pstwin::realnet {

std::optional<HostPort> split_host_port(std::string_view text, bool any_port) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  HostPort out{std::string(text.substr(0, colon)), 0};
  const std::string_view port = text.substr(colon + 1);
  if (any_port && port == "*") return out;
  unsigned value = 0;
  const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (error != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    return std::nullopt;
  out.port = static_cast<std::uint16_t>(value);
  return out;
}

}  // namespace pstwin::realnet
