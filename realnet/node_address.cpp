#include "realnet/node_address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "realnet/nic_rate.hpp"

namespace pstwin::realnet {
namespace {

using IfaddrsPtr = std::unique_ptr<ifaddrs, decltype(&freeifaddrs)>;

IfaddrsPtr interfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) list = nullptr;
  return {list, &freeifaddrs};
}

std::string text_of(const sockaddr* address) {
  char text[INET_ADDRSTRLEN] = {};
  const auto* in = reinterpret_cast<const sockaddr_in*>(address);
  return inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) ? text : "";
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out.empty() ? "none" : out;
}

}  // namespace

std::string ipv4_of_interface(std::string_view interface) {
  const auto list = interfaces();
  for (const ifaddrs* entry = list.get(); entry != nullptr; entry = entry->ifa_next)
    if (entry->ifa_addr != nullptr && entry->ifa_addr->sa_family == AF_INET && interface == entry->ifa_name)
      return text_of(entry->ifa_addr);
  return "";
}

std::vector<std::string> ipv4_interfaces() {
  std::vector<std::string> found;
  const auto list = interfaces();
  for (const ifaddrs* entry = list.get(); entry != nullptr; entry = entry->ifa_next)
    if (entry->ifa_addr != nullptr && entry->ifa_addr->sa_family == AF_INET)
      found.push_back(std::string(entry->ifa_name) + " (" + text_of(entry->ifa_addr) + ")");
  return found;
}

std::string resolve_ipv4(std::string_view host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(std::string(host).c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return "";
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, &freeaddrinfo);
  return text_of(found->ai_addr);
}

std::string route_source(std::string_view ipv4, int port) {
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, std::string(ipv4).c_str(), &peer.sin_addr) != 1) return "";
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string source;
  // A datagram socket's connect sends nothing: it only picks the route, and with it the source.
  if (connect(fd, reinterpret_cast<const sockaddr*>(&peer), sizeof peer) == 0) {
    sockaddr_in local{};
    socklen_t size = sizeof local;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &size) == 0)
      source = text_of(reinterpret_cast<const sockaddr*>(&local));
  }
  close(fd);
  return source;
}

bool is_loopback_ipv4(std::string_view ipv4) {
  in_addr address{};
  return inet_pton(AF_INET, std::string(ipv4).c_str(), &address) == 1 && (ntohl(address.s_addr) >> 24) == 127;
}

void resolve_node_address(NodeEnv& env) {
  if (env.role == Role::kScheduler) return;
  const std::string root = resolve_ipv4(env.root_uri);
  if (!env.node_host_given) {
    if (!env.interface.empty()) {
      env.node_host = ipv4_of_interface(env.interface);
      if (env.node_host.empty())
        throw NodeEnvError("DMLC_INTERFACE=\"" + env.interface +
                           "\": this machine has no interface of that name with an IPv4 address; its "
                           "interfaces: " +
                           joined(ipv4_interfaces()) +
                           " (or set DMLC_NODE_HOST to the address to advertise)");
    } else if (!is_loopback_ipv4(root)) {
      env.node_host = root.empty() ? "" : route_source(root, env.root_port);
      if (env.node_host.empty())
        throw NodeEnvError("DMLC_PS_ROOT_URI=\"" + env.root_uri +
                           "\": no route from this machine to the scheduler, so no address of this node "
                           "to advertise; set DMLC_NODE_HOST to this machine's address that the other "
                           "nodes reach, or DMLC_INTERFACE to its interface");
    }
  }
  // The scheduler elsewhere: it and the other machines' nodes would dial this machine's loopback.
  if (is_loopback_ipv4(env.node_host) && !root.empty() && !is_loopback_ipv4(root) &&
      interface_of(root).empty()) {
    const std::string source = env.node_host_given
                                   ? "DMLC_NODE_HOST=\"" + env.node_host + "\""
                                   : "DMLC_INTERFACE=\"" + env.interface + "\" (" + env.node_host + ")";
    throw NodeEnvError(source + " is a loopback address, but the scheduler (DMLC_PS_ROOT_URI=\"" +
                       env.root_uri +
                       "\") is on another machine, which could not reach this node there; set DMLC_NODE_HOST "
                       "to this machine's address on the job's network (unset, the address of the route to "
                       "the scheduler is used)");
  }
}

}  // namespace pstwin::realnet
