#include "realnet/netns_cluster.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

extern char** environ;

namespace pstwin::realnet {
namespace {

struct ToolResult {
  int exit_code = -1;  // 127: not found
  std::string output;  // stdout and stderr
};

// Runs a command (looked up in PATH) and waits for it; never throws for its failure.
ToolResult run_tool(const std::vector<std::string>& args) {
  ToolResult result;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    result.output = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<std::string> text = args;
  std::vector<char*> argv;
  for (auto& a : text) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    result.exit_code = 127;
    result.output = args[0] + ": " + std::strerror(rc);
    return result;
  }
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n > 0) {
      result.output.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string joined(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += (out.empty() ? "" : " ") + shell_quote(a);
  return out;
}

// Runs a setup step; a failure throws naming the command and what it printed.
void must(const std::vector<std::string>& args, const std::string& fix = "") {
  const ToolResult r = run_tool(args);
  if (r.exit_code == 0) return;
  std::string said = r.output;
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  throw NetnsError("namespace cluster: `" + joined(args) + "` failed (exit status " +
                   std::to_string(r.exit_code) + "): " + said + (fix.empty() ? "" : "; " + fix));
}

// Host i gets 10.213.(100 + i / 150).(100 + i % 150): every octet has three digits, so the text
// order of addresses is the host order, and the scheduler's address-ordered server ranks follow the
// scenario's placement (servers on lower hosts get lower ranks, as in the simulator).
std::string address_of(int index) {
  return "10.213." + std::to_string(100 + index / 150) + "." + std::to_string(100 + index % 150);
}

// tbf's bucket: 1 ms at the rate, at least 16 KB (enough for a 1500 B MTU at any timer resolution).
std::uint64_t bucket_bytes(double bandwidth_Bps) {
  return std::max<std::uint64_t>(16384, static_cast<std::uint64_t>(bandwidth_Bps * 1e-3));
}

// tbf on one direction of a link: rate in bit/s, the bucket above, a queue of `limit_bytes`.
std::vector<std::string> tbf(const std::string& netns, const std::string& dev, double bandwidth_Bps,
                             std::uint64_t limit_bytes) {
  const auto rate_bit = static_cast<std::uint64_t>(std::llround(bandwidth_Bps * 8));
  return {"tc",
          "-n",
          netns,
          "qdisc",
          "replace",
          "dev",
          dev,
          "root",
          "tbf",
          "rate",
          std::to_string(rate_bit) + "bit",
          "burst",
          std::to_string(bucket_bytes(bandwidth_Bps)),
          "limit",
          std::to_string(limit_bytes)};
}

// A host's own egress (`.up`) is its NIC's queue: Linux's default txqueuelen of 1000 full frames.
// With a 10 ms switch buffer there, one server's 8 TCP connections overflowed their own host's queue
// (30,000 drops and 17,000 retransmissions in a 30 s run of lb_hetero_netns); a real host's kernel
// queues them instead.
constexpr std::uint64_t kHostQueueBytes = 1000 * 1514;
// A switch port's buffer (`.down`): 10 ms at the port's rate, plus the bucket (tbf's `latency 10ms`).
std::uint64_t switch_queue_bytes(double bandwidth_Bps) {
  return std::max<std::uint64_t>(
      kHostQueueBytes, static_cast<std::uint64_t>(bandwidth_Bps * 10e-3) + bucket_bytes(bandwidth_Bps));
}

const std::string kOffloadsFix =
    "ethtool is needed to turn offloads off on shaped links (bash .ci/setup installs it)";

}  // namespace

std::string NetnsCluster::prefix_for(pid_t pid) {
  return "pstwin-" + std::to_string(pid) + "-";
}

std::vector<std::string> NetnsCluster::namespaces_with_prefix(const std::string& prefix) {
  std::vector<std::string> names;
  const ToolResult r = run_tool({"ip", "netns", "list"});
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    const std::string name = line.substr(0, line.find(' '));  // "name (id: 3)"
    if (name.starts_with(prefix)) names.push_back(name);
  }
  return names;
}

std::string NetnsCluster::unavailable_reason() {
  if (::geteuid() != 0) return "network namespaces need root (CAP_NET_ADMIN); run as root";
  for (const char* tool : {"ip", "tc", "ethtool"})
    if (run_tool({tool, "--version"}).exit_code == 127)
      return std::string("`") + tool + "` is not installed (bash .ci/setup installs iproute2 and ethtool)";
  const std::string probe = prefix_for(::getpid()) + "probe";
  const ToolResult r = run_tool({"ip", "netns", "add", probe});
  if (r.exit_code != 0) return "`ip netns add` failed: " + r.output;
  run_tool({"ip", "netns", "del", probe});
  return "";
}

NetnsCluster::NetnsCluster(const Scenario& sc, std::string prefix,
                           std::function<void(const std::string&)> log, std::string staging_prefix)
    : prefix_(std::move(prefix)), log_(std::move(log)) {
  if (const std::string why = unavailable_reason(); !why.empty())
    throw NetnsError("--netns: cannot make network namespaces here: " + why);
  // The reaper first, so that even a launcher killed halfway through setup leaves nothing: it waits
  // for EOF on a pipe only this process holds open, then deletes every namespace with the prefix.
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw NetnsError(std::string("pipe: ") + std::strerror(errno));
  const std::string script =
      "trap '' INT TERM HUP; cat >/dev/null; "
      "for ns in $(ip netns list | cut -d' ' -f1); do case \"$ns\" in \"$1\"*) ip netns del \"$ns\";; esac; "
      "done; if [ -n \"$2\" ]; then rm -f \"/dev/shm/$2\"*; fi";
  std::vector<std::string> text{
      "/bin/sh", "-c", script, "pstwin-netns-reaper", prefix_, std::move(staging_prefix)};
  std::vector<char*> argv;
  for (auto& a : text) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);  // a terminal's Ctrl-C does not reach it
  const int rc = ::posix_spawn(&reaper_, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[0]);
  if (rc != 0) {
    ::close(fds[1]);
    throw NetnsError(std::string("cannot start the namespace reaper (/bin/sh): ") + std::strerror(rc));
  }
  reaper_pipe_ = fds[1];
  try {
    build(sc);
  } catch (...) {
    remove();
    throw;
  }
}

void NetnsCluster::build(const Scenario& sc) {
  const std::string sw = prefix_ + "sw";
  must({"ip", "netns", "add", sw});
  must({"ip", "-n", sw, "link", "add", "br0", "type", "bridge"});
  must({"ip", "-n", sw, "link", "set", "br0", "up"});
  switch_fd_ = ::open(("/run/netns/" + sw).c_str(), O_RDONLY | O_CLOEXEC);
  if (switch_fd_ < 0)
    throw NetnsError("namespace cluster: cannot open /run/netns/" + sw + ": " + std::strerror(errno));
  for (int i = 0; i < sc.host_count(); ++i) {
    NetnsHost h{sc.host_name(i), prefix_ + sc.host_name(i), address_of(i), sc.host_link(sc.host_name(i))};
    must({"ip", "netns", "add", h.netns});
    // The switch side is named after the host; the host side is "eth0" in the host's namespace.
    must({"ip", "-n", sw, "link", "add", h.name, "type", "veth", "peer", "name", "eth0", "netns", h.netns});
    must({"ip", "-n", sw, "link", "set", h.name, "master", "br0", "up"});
    must({"ip", "-n", h.netns, "addr", "add", h.address + "/16", "dev", "eth0"});
    must({"ip", "-n", h.netns, "link", "set", "eth0", "up"});
    must({"ip", "-n", h.netns, "link", "set", "lo", "up"});
    // Segmentation offloads would hand tbf 64 KB super-frames: shaping is per wire frame.
    must({"ip", "netns", "exec", h.netns, "ethtool", "-K", "eth0", "tso", "off", "gso", "off", "gro", "off"},
         kOffloadsFix);
    must({"ip", "netns", "exec", sw, "ethtool", "-K", h.name, "tso", "off", "gso", "off", "gro", "off"},
         kOffloadsFix);
    must(tbf(h.netns, "eth0", h.link.bandwidth_Bps, kHostQueueBytes));                      // <h>.up
    must(tbf(sw, h.name, h.link.bandwidth_Bps, switch_queue_bytes(h.link.bandwidth_Bps)));  // <h>.down
    const int fd = ::open(("/run/netns/" + h.netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      throw NetnsError("namespace cluster: cannot open /run/netns/" + h.netns + ": " + std::strerror(errno));
    fds_.push_back(fd);
    hosts_.push_back(std::move(h));
  }
  if (log_)
    log_("namespace cluster " + prefix_ + "*: " + std::to_string(hosts_.size()) +
         " hosts on a bridge, tbf-shaped veths, offloads off; latency not emulated (no netem)");
  reset_counters();
}

void NetnsCluster::cut(int id, const std::vector<std::string>& hosts) {
  std::string set = "{ ";
  for (std::size_t i = 0; i < hosts.size(); ++i) set += (i ? ", \"" : "\"") + hosts[i] + "\"";
  set += " }";
  const std::string sw = prefix_ + "sw";
  const std::string chain = "partition" + std::to_string(id);
  const std::string fix = "install nftables (apt-get install nftables), or run without --kernel-partitions";
  must({"ip", "netns", "exec", sw, "nft", "add", "table", "bridge", "pstwin"}, fix);
  must({"ip", "netns", "exec", sw, "nft", "add", "chain", "bridge", "pstwin", chain,
        "{ type filter hook forward priority 0; }"},
       fix);
  must({"ip", "netns", "exec", sw, "nft", "add", "rule", "bridge", "pstwin", chain, "iifname", set, "oifname",
        "!=", set, "drop"},
       fix);
  must({"ip", "netns", "exec", sw, "nft", "add", "rule", "bridge", "pstwin", chain, "iifname", "!=", set,
        "oifname", set, "drop"},
       fix);
}

void NetnsCluster::heal(int id) {
  must({"ip", "netns", "exec", prefix_ + "sw", "nft", "delete", "chain", "bridge", "pstwin",
        "partition" + std::to_string(id)});
}

NetnsCluster::~NetnsCluster() {
  remove();
}

void NetnsCluster::remove() {
  for (const int fd : fds_) ::close(fd);
  fds_.clear();
  if (switch_fd_ >= 0) ::close(switch_fd_);
  switch_fd_ = -1;
  for (const auto& name : namespaces_with_prefix(prefix_)) run_tool({"ip", "netns", "del", name});
  if (reaper_pipe_ >= 0) {
    ::close(reaper_pipe_);  // the reaper finds nothing left and exits
    reaper_pipe_ = -1;
  }
  if (reaper_ > 0) {
    int status = 0;
    while (::waitpid(reaper_, &status, 0) < 0 && errno == EINTR) {
    }
    reaper_ = -1;
  }
}

const NetnsHost& NetnsCluster::host(const std::string& name) const {
  for (const auto& h : hosts_)
    if (h.name == name) return h;
  throw std::out_of_range("namespace cluster " + prefix_ + ": no host " + name);
}

int NetnsCluster::netns_fd(const std::string& name) const {
  for (std::size_t i = 0; i < hosts_.size(); ++i)
    if (hosts_[i].name == name) return fds_.at(i);
  throw std::out_of_range("namespace cluster " + prefix_ + ": no host " + name);
}

std::vector<NetnsCluster::Counters> NetnsCluster::read_counters() const {
  std::vector<Counters> counters(hosts_.size());
  const ToolResult r = run_tool({"ip", "-n", prefix_ + "sw", "-s", "-j", "link", "show"});
  if (r.exit_code != 0) return counters;
  const auto links = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  if (!links.is_array()) return counters;
  for (const auto& link : links) {
    if (!link.contains("ifname") || !link.contains("stats64")) continue;
    for (std::size_t i = 0; i < hosts_.size(); ++i)
      if (link["ifname"] == hosts_[i].name) {
        counters[i].rx = link["stats64"]["rx"].value("bytes", std::uint64_t{0});
        counters[i].tx = link["stats64"]["tx"].value("bytes", std::uint64_t{0});
      }
  }
  return counters;
}

void NetnsCluster::reset_counters() {
  baseline_ = read_counters();
}

std::vector<LinkUsage> NetnsCluster::link_usage(double seconds) const {
  const auto now = read_counters();
  std::vector<LinkUsage> links;
  for (std::size_t i = 0; i < hosts_.size(); ++i) {
    const double bw = hosts_[i].link.bandwidth_Bps;
    auto usage = [&](const std::string& suffix, std::uint64_t bytes) {
      links.push_back({hosts_[i].name + suffix, bytes, bw,
                       seconds > 0 ? static_cast<double>(bytes) / (bw * seconds) : 0});
    };
    const Counters base = i < baseline_.size() ? baseline_[i] : Counters{};
    usage(".up", now[i].rx - std::min(now[i].rx, base.rx));
    usage(".down", now[i].tx - std::min(now[i].tx, base.tx));
  }
  return links;
}

namespace {

// Packets the root qdisc (tbf) of `dev` in `netns` dropped; nullopt if tc could not say.
std::optional<std::uint64_t> qdisc_drops(const std::string& netns, const std::string& dev) {
  const ToolResult r = run_tool({"tc", "-n", netns, "-s", "-j", "qdisc", "show", "dev", dev});
  if (r.exit_code != 0) return std::nullopt;
  const auto qdiscs = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  if (!qdiscs.is_array()) return std::nullopt;
  for (const auto& q : qdiscs)
    if (q.value("root", false)) return q.value("drops", std::uint64_t{0});
  return std::nullopt;
}

// TCP segments retransmitted in `netns` (its /proc/net/snmp "Tcp: ... RetransSegs").
std::optional<std::uint64_t> retransmitted_segments(const std::string& netns) {
  const ToolResult r = run_tool({"ip", "netns", "exec", netns, "cat", "/proc/net/snmp"});
  if (r.exit_code != 0) return std::nullopt;
  std::istringstream lines(r.output);
  std::vector<std::string> names;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("Tcp:")) continue;
    std::istringstream fields(line.substr(4));
    std::vector<std::string> row;
    for (std::string f; fields >> f;) row.push_back(f);
    if (names.empty()) {
      names = std::move(row);
      continue;
    }
    const auto it = std::find(names.begin(), names.end(), "RetransSegs");
    const auto index = static_cast<std::size_t>(it - names.begin());
    if (it == names.end() || index >= row.size()) return std::nullopt;
    return std::stoull(row[index]);
  }
  return std::nullopt;
}

}  // namespace

void NetnsCluster::add_losses(std::vector<LinkUsage>& links) const {
  for (std::size_t i = 0; i < hosts_.size() && 2 * i + 1 < links.size(); ++i) {
    const auto& h = hosts_[i];
    links[2 * i].drops = qdisc_drops(h.netns, "eth0");
    links[2 * i].retransmitted = retransmitted_segments(h.netns);
    links[2 * i + 1].drops = qdisc_drops(prefix_ + "sw", h.name);
  }
}

NetworkEmulation netns_emulation() {
  return {"netns", false,
          "one network namespace per scenario host, veths to a bridge shaped by tbf to each host's NIC "
          "bandwidth, offloads off; link latency NOT emulated (this kernel has no netem): veth latency "
          "applies. links count Ethernet frames (TCP/IP headers and ACKs included)"};
}

}  // namespace pstwin::realnet
