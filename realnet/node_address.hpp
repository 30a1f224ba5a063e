// What a server or worker binds and advertises to the other nodes: DMLC_NODE_HOST if set, else the
// IPv4 address of DMLC_INTERFACE, else the address of this machine's route to the scheduler (a job on
// one machine, DMLC_PS_ROOT_URI on loopback, keeps 127.0.0.1); on DMLC_NODE_PORT if set. A loopback
// address while the scheduler is on another machine is refused: no other machine could reach it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "realnet/node_env.hpp"

namespace pstwin::realnet {

// Fills env.node_host for a server or worker (the scheduler binds DMLC_PS_ROOT_URI); throws
// NodeEnvError naming the variable, the value and the fix.
void resolve_node_address(NodeEnv& env);

// The IPv4 address of `interface` ("" if it has none or does not exist).
std::string ipv4_of_interface(std::string_view interface);
// "name (address)" of every interface with an IPv4 address, for messages.
std::vector<std::string> ipv4_interfaces();
// The IPv4 address `host` (an address or a name) resolves to, "" if none.
std::string resolve_ipv4(std::string_view host);
// The local address of this machine's route to `ipv4`:`port` ("" where there is none).
std::string route_source(std::string_view ipv4, int port);
bool is_loopback_ipv4(std::string_view ipv4);

}  // namespace pstwin::realnet
