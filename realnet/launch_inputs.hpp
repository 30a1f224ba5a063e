// What `pstwin launch` and `pstwin node --launched` read from outside the program: the hostfile
// and the launch message on a node's stdin. Parsing only (no process, socket or scenario is made
// here), so that tests/fuzz/fuzz_launch.cpp reaches it without the rest of the launcher.
#pragma once

#include <functional>
#include <istream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "scenario/scenario.hpp"

namespace pstwin::realnet {

// A hostfile, a remote shell command or a launch message that cannot be used; what() names the
// file and line (or the option), the value and a fix. Bad input: exit status 2.
class LaunchError : public ScenarioError {
 public:
  using ScenarioError::ScenarioError;
};

struct LaunchHost {
  std::string name;     // as the hostfile names it: what {host} becomes in the remote shell command
  std::string address;  // the IPv4 address its nodes bind and advertise (DMLC_NODE_HOST)
  int slots = 0;        // at most this many servers, workers and validators on it; 0: no limit
  int line = 0;         // in the hostfile
};

// A hostfile: one host a line, `HOST [slots=N] [address=IP]`; `#` starts a comment, blank lines
// are skipped. Without address=, HOST (less any `user@`) is the address, resolved here if it is a
// name. A loopback address on a hostfile of several hosts is refused: the other hosts could not
// reach it. `path` names the file in errors. `resolve` turns a host name into its IPv4 address or
// throws LaunchError naming `where` (the file and line).
using HostResolver = std::function<std::string(const std::string& host, const std::string& where)>;
// The system's resolver (getaddrinfo); an IPv4 address is itself.
std::string resolve_ipv4(const std::string& host, const std::string& where);
std::vector<LaunchHost> parse_hostfile(std::string_view text, const std::string& path,
                                       const HostResolver& resolve = resolve_ipv4);

// What `pstwin launch` writes to a node's stdin and `pstwin node --launched` reads: the line
// "pstwin-launch 1", a line "env NAME=VALUE" per variable, the line "scenario BYTES" and that many
// bytes of scenario TOML. The launcher keeps stdin open after it: its end stops the node.
struct LaunchMessage {
  std::map<std::string, std::string> env;
  std::string scenario;  // TOML
};
std::string launch_message_text(const LaunchMessage& message);
// Throws LaunchError naming what is wrong (a node's bad stdin must not look like a crash).
LaunchMessage read_launch_message(std::istream& in);

// Words split at blanks, as a hostfile line or the --rsh option is.
std::vector<std::string> words_of(std::string_view text);

}  // namespace pstwin::realnet
