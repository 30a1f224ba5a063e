#include "realnet/nic_rate.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <charconv>
#include <cstring>
#include <fstream>
#include <memory>

#include "realnet/node_env.hpp"

namespace pstwin::realnet {

std::string interface_of(std::string_view ipv4) {
  in_addr wanted{};
  if (inet_pton(AF_INET, std::string(ipv4).c_str(), &wanted) != 1) return "";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  const std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owned(list, &freeifaddrs);
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    in_addr address{};
    std::memcpy(&address, &reinterpret_cast<const sockaddr_in*>(entry->ifa_addr)->sin_addr, sizeof address);
    if (address.s_addr == wanted.s_addr) return entry->ifa_name;
  }
  return "";
}

std::optional<double> interface_speed_Bps(const std::filesystem::path& sysfs_net,
                                          std::string_view interface) {
  std::ifstream file(sysfs_net / std::string(interface) / "speed");
  std::string text;
  if (!file || !std::getline(file, text)) return std::nullopt;  // loopback's read fails with EINVAL
  long long megabits = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), megabits);
  if (error != std::errc() || end != text.data() + text.size() || megabits <= 0) return std::nullopt;
  return static_cast<double>(megabits) * 1e6 / 8;
}

double resolve_nic_rate(std::string_view node_host, const std::filesystem::path& sysfs_net) {
  const std::string fix =
      "; set PSTWIN_NIC_RATE to the NIC's rate in bytes per second instead, e.g. "
      "125000000 for 1 Gb/s, or leave it unset for no pacing";
  const std::string interface = interface_of(node_host);
  if (interface.empty())
    throw NodeEnvError("PSTWIN_NIC_RATE=auto: no interface of this machine holds " + std::string(node_host) +
                       " (DMLC_NODE_HOST, an IPv4 address of this machine)" + fix);
  const auto rate = interface_speed_Bps(sysfs_net, interface);
  if (!rate)
    throw NodeEnvError("PSTWIN_NIC_RATE=auto: interface " + interface + " (" + std::string(node_host) +
                       ") reports no link speed in " + (sysfs_net / interface / "speed").string() +
                       " (loopback, or a link that is down)" + fix);
  return *rate;
}

}  // namespace pstwin::realnet
