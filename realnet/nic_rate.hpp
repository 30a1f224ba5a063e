// PSTWIN_NIC_RATE=auto: a node's NIC rate as the kernel reports it. The interface is the one that holds
// the node's IPv4 address (DMLC_NODE_HOST; the scheduler's DMLC_PS_ROOT_URI), its rate the link speed
// in /sys/class/net/IF/speed (Mb/s). Loopback and a link that is down report none; a veth reports a
// nominal speed that tc shaping does not change, so namespace clusters pass the shaped rate instead
// (`pstwin run --netns` does).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace pstwin::realnet {

// The interface holding `ipv4` (e.g. "lo" for 127.0.0.1), "" if none does or it is no IPv4 address.
std::string interface_of(std::string_view ipv4);

// DIR/IF/speed in bytes/s; nullopt where the kernel reports no speed (missing, unreadable, -1 or 0).
std::optional<double> interface_speed_Bps(const std::filesystem::path& sysfs_net, std::string_view interface);

// The rate for PSTWIN_NIC_RATE=auto, or a NodeEnvError naming the variable, the interface and the fix.
double resolve_nic_rate(std::string_view node_host,
                        const std::filesystem::path& sysfs_net = "/sys/class/net");

}  // namespace pstwin::realnet
