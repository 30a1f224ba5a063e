// A scenario's hosts as Linux network namespaces on this machine (`pstwin run --netns`): one
// namespace per scenario host with a veth "eth0" to a bridge in a "switch" namespace, addresses in
// 10.213.0.0/16, both directions of every host link shaped by `tbf` to the host's NIC bandwidth,
// offloads off. Everything is named "<prefix>..." and deleted by that prefix, on destruction, and by
// a watchdog process should this process die without running destructors (SIGKILL, crash).
// Latency is not emulated: this kernel has no `netem` (see docs/FIDELITY.md).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "report/run_report.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::realnet {

// A namespace cluster could not be made; what() names the command, what it said and a fix.
class NetnsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct NetnsHost {
  std::string name;     // scenario host: "h0"
  std::string netns;    // "<prefix>h0"
  std::string address;  // "10.213.100.100": ordered as the host index, also as text (see .cpp)
  LinkSpec link;        // what its veth is shaped to
};

class NetnsCluster {
 public:
  // "" when namespace clusters can be made here, else why not (not root, `ip`/`tc`/`ethtool` missing,
  // `ip netns add` refused). Tries a throw-away namespace.
  static std::string unavailable_reason();
  // The prefix of every namespace a launcher with this pid creates: "pstwin-<pid>-".
  static std::string prefix_for(pid_t pid);
  // Names of the existing namespaces starting with `prefix`.
  static std::vector<std::string> namespaces_with_prefix(const std::string& prefix);

  // Creates the cluster; throws NetnsError (after removing what it made) if a step fails. When this
  // process ends, however it ends, a reaper deletes the namespaces and the shared-memory objects
  // named `staging_prefix`* (the job's staging: nodes killed with the launcher cannot unlink theirs).
  NetnsCluster(const Scenario& scenario, std::string prefix, std::function<void(const std::string&)> log = {},
               std::string staging_prefix = "");
  ~NetnsCluster();
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  const std::string& prefix() const { return prefix_; }
  const NetnsHost& host(const std::string& name) const;  // throws std::out_of_range for unknown names
  const std::vector<NetnsHost>& hosts() const { return hosts_; }
  // An O_CLOEXEC descriptor of the host's namespace, for setns(fd, CLONE_NEWNET) in a child.
  int netns_fd(const std::string& name) const;

  // An O_CLOEXEC descriptor of the switch namespace (whose veth ports are named after the hosts).
  int switch_netns_fd() const { return switch_fd_; }

  // Starts the byte counters from now (what setup sent, ARP and the like, is not counted).
  void reset_counters();
  // `<h>.up` (bytes the host sent) and `<h>.down` (received), as the simulator names its links, from
  // the kernel counters of the switch side of each veth (Ethernet frames: headers and ACKs count).
  // Utilization = bytes / (bandwidth x seconds).
  std::vector<LinkUsage> link_usage(double seconds) const;
  // Adds to `links` (as link_usage made them) what the kernel saw go wrong on each link: packets tbf
  // dropped on each direction, and TCP segments each host retransmitted (on its `.up`).
  void add_losses(std::vector<LinkUsage>& links) const;

  // A partition made by the kernel: until heal(id), the switch drops every frame between `hosts` and
  // the other hosts (nftables, bridge family, in the switch namespace), both ways. Throws NetnsError
  // naming the command (nft missing: install nftables).
  void cut(int id, const std::vector<std::string>& hosts);
  void heal(int id);

  // Deletes every namespace with the prefix (and so every veth and qdisc in them). Idempotent.
  void remove();

 private:
  struct Counters {
    std::uint64_t rx = 0;  // switch side receives what the host sent
    std::uint64_t tx = 0;
  };
  std::vector<Counters> read_counters() const;
  void build(const Scenario& scenario);

  std::string prefix_;
  std::function<void(const std::string&)> log_;
  std::vector<NetnsHost> hosts_;
  std::vector<int> fds_;
  int switch_fd_ = -1;
  std::vector<Counters> baseline_;
  pid_t reaper_ = -1;
  int reaper_pipe_ = -1;  // write end; its closing (our exit, however) tells the reaper to clean up
};

// What a namespace cluster does and does not reproduce of the scenario's network, for results.json.
NetworkEmulation netns_emulation();

}  // namespace pstwin::realnet
