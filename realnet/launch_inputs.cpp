#include "realnet/launch_inputs.hpp"

#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <sstream>

namespace pstwin::realnet {
namespace {

constexpr std::string_view kMessageHeader = "pstwin-launch 1";
// Bounds on what a node reads from its stdin: a resolved scenario is a few KB.
constexpr std::size_t kMaxMessageLines = 4096;
constexpr std::size_t kMaxLineBytes = 64 * 1024;
constexpr std::size_t kMaxScenarioBytes = 16 * 1024 * 1024;

bool is_ipv4(const std::string& text) {
  in_addr parsed{};
  return ::inet_pton(AF_INET, text.c_str(), &parsed) == 1;
}

bool is_loopback(const std::string& address) {
  return address.starts_with("127.");
}

}  // namespace

std::string resolve_ipv4(const std::string& host, const std::string& where) {
  if (is_ipv4(host)) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0 || found == nullptr)
    throw LaunchError(where + ": cannot resolve \"" + host + "\" to an IPv4 address (" + ::gai_strerror(rc) +
                      "); give its address: " + host + " address=IP");
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owner(found, ::freeaddrinfo);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text, sizeof text);
  return text;
}

std::vector<std::string> words_of(std::string_view text) {
  std::vector<std::string> words;
  std::istringstream in{std::string(text)};
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

std::vector<LaunchHost> parse_hostfile(std::string_view text, const std::string& path,
                                       const HostResolver& resolve) {
  std::vector<LaunchHost> hosts;
  std::istringstream in{std::string(text)};
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const std::string where = path + ":" + std::to_string(number);
    const auto words = words_of(line.substr(0, line.find('#')));
    if (words.empty()) continue;
    LaunchHost host;
    host.name = words[0];
    host.line = number;
    if (host.name.find('=') != std::string::npos)
      throw LaunchError(where + ": \"" + line + "\": expected HOST [slots=N] [address=IP], the host first");
    for (std::size_t i = 1; i < words.size(); ++i) {
      const auto& word = words[i];
      if (word.starts_with("slots=")) {
        const std::string value = word.substr(6);
        int slots = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), slots);
        if (ec != std::errc{} || end != value.data() + value.size() || slots < 1 || slots > 65536)
          throw LaunchError(where + ": slots=" + value + ": expected how many nodes may run on " + host.name +
                            ", 1..65536, e.g. slots=4");
        host.slots = slots;
      } else if (word.starts_with("address=")) {
        host.address = word.substr(8);
        if (!is_ipv4(host.address))
          throw LaunchError(where + ": address=" + host.address +
                            ": expected the IPv4 address the other hosts reach " + host.name +
                            " at, e.g. "
                            "address=10.0.0.2");
      } else {
        throw LaunchError(where + ": \"" + word + "\": expected slots=N or address=IP after the host " +
                          host.name);
      }
    }
    if (host.address.empty()) {
      const auto at = host.name.rfind('@');
      host.address = resolve(at == std::string::npos ? host.name : host.name.substr(at + 1), where);
    }
    for (const auto& other : hosts)
      if (other.name == host.name)
        throw LaunchError(where + ": " + host.name + " again (line " + std::to_string(other.line) +
                          "): list each host once, with slots=N for several nodes");
    hosts.push_back(std::move(host));
  }
  if (hosts.empty()) throw LaunchError(path + ": no hosts; list one a line: HOST [slots=N] [address=IP]");
  if (hosts.size() > 1)
    for (const auto& host : hosts)
      if (is_loopback(host.address))
        throw LaunchError(path + ":" + std::to_string(host.line) + ": " + host.name + "'s address " +
                          host.address + " is a loopback address, but the job spans " +
                          std::to_string(hosts.size()) +
                          " hosts: the others cannot reach it there; give the address they reach it at (" +
                          host.name + " address=IP)");
  return hosts;
}

std::string launch_message_text(const LaunchMessage& message) {
  std::string text = std::string(kMessageHeader) + "\n";
  for (const auto& [name, value] : message.env) text += "env " + name + "=" + value + "\n";
  text += "scenario " + std::to_string(message.scenario.size()) + "\n" + message.scenario;
  return text;
}

LaunchMessage read_launch_message(std::istream& in) {
  const std::string fix = " (what `pstwin launch` sends; without it, start `pstwin node` without --launched)";
  auto next_line = [&](std::string& line) {
    line.clear();
    for (char c; in.get(c) && c != '\n';) {
      if (line.size() >= kMaxLineBytes)
        throw LaunchError("--launched: a line of stdin over " + std::to_string(kMaxLineBytes) + " bytes" +
                          fix);
      line += c;
    }
    return in.good() || !line.empty();
  };
  std::string line;
  if (!next_line(line) || line != kMessageHeader)
    throw LaunchError("--launched: stdin starts with \"" + line.substr(0, 80) + "\", expected \"" +
                      std::string(kMessageHeader) + "\"" + fix);
  LaunchMessage message;
  for (std::size_t count = 0;; ++count) {
    if (count > kMaxMessageLines || !next_line(line))
      throw LaunchError("--launched: stdin ended before its \"scenario BYTES\" line" + fix);
    if (line.starts_with("env ")) {
      const auto eq = line.find('=');
      if (eq == std::string::npos || eq == 4)
        throw LaunchError("--launched: \"" + line.substr(0, 80) + "\": expected env NAME=VALUE" + fix);
      message.env[line.substr(4, eq - 4)] = line.substr(eq + 1);
      continue;
    }
    std::size_t bytes = 0;
    const std::string_view size = std::string_view(line).substr(std::min(line.size(), std::size_t{9}));
    const auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), bytes);
    if (!line.starts_with("scenario ") || ec != std::errc{} || end != size.data() + size.size() ||
        bytes > kMaxScenarioBytes)
      throw LaunchError("--launched: \"" + line.substr(0, 80) +
                        "\": expected env NAME=VALUE or scenario BYTES (at most " +
                        std::to_string(kMaxScenarioBytes) + ")" + fix);
    message.scenario.resize(bytes);
    if (!in.read(message.scenario.data(), static_cast<std::streamsize>(bytes)))
      throw LaunchError("--launched: stdin ended within the scenario's " + std::to_string(bytes) + " bytes" +
                        fix);
    return message;
  }
}

}  // namespace pstwin::realnet
