#include "sim/platform.hpp"

#include <malloc.h>

#include <simgrid/s4u.hpp>
#include <sstream>
#include <utility>
#include <xbt/config.hpp>

namespace pstwin::sim {
namespace s4u = simgrid::s4u;

namespace {
// TCP over loopback on these machines: 1.8-3.5 GB/s per stream, 31.5 us for a 64 B round trip.
// The model multiplies every latency by its latency factor, so the link gets 15 us divided by it.
constexpr double kLoopbackBandwidth = 3e9;
constexpr double kLoopbackOneWay = 15e-6;

// The constant factors each SimGrid model applies unless overridden (SimGrid 3.32 defaults).
std::pair<double, double> model_factors(const std::string& model) {
  if (model == "LV08") return {0.97, 13.01};
  return {1.0, 1.0};
}
// network/crosstraffic (on by default) charges this share of every flow to the reverse links (ACKs).
constexpr double kCrossTraffic = 0.05;

// glibc's largest dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX), and the trim
// threshold it sets with it (twice that).
constexpr int kLargeBlockBytes = 32 * 1024 * 1024;
constexpr int kTrimBytes = 2 * kLargeBlockBytes;

std::string number(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

// `backbone` (may be null): a link every message to or from this host's NIC also crosses; SimGrid's
// star zone keeps it once per route.
s4u::Host* add_host(s4u::NetZone* zone, const Scenario& sc, const std::string& name, Platform& platform,
                    s4u::Link* backbone = nullptr) {
  const double loopback_latency = kLoopbackOneWay / platform.latency_factor;
  auto* host =
      zone->create_host(name, sc.cluster.host_speed_flops)->set_core_count(sc.cluster.host_cores)->seal();
  const LinkSpec spec = sc.host_link(name);
  auto* nic =
      zone->create_split_duplex_link(name + ".nic", spec.bandwidth_Bps)->set_latency(spec.latency_s)->seal();
  std::vector<s4u::LinkInRoute> route{s4u::LinkInRoute(nic, s4u::LinkInRoute::Direction::UP)};
  if (backbone) route.emplace_back(backbone);
  zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr, route, true);
  // Processes on one host talk over the kernel's loopback, not the NIC.
  auto* loopback = zone->create_link(name + ".loopback", kLoopbackBandwidth)
                       ->set_latency(loopback_latency)
                       ->set_sharing_policy(s4u::Link::SharingPolicy::FATPIPE)
                       ->seal();
  zone->add_route(host->get_netpoint(), host->get_netpoint(), nullptr, nullptr, {s4u::LinkInRoute(loopback)},
                  false);
  platform.hosts[name] = host;
  platform.links.push_back({name + ".up", spec.bandwidth_Bps});
  platform.links.push_back({name + ".down", spec.bandwidth_Bps});
  return host;
}
}  // namespace

EngineArguments::EngineArguments(std::string program)
    : arguments_{std::move(program), "--log=root.thres:critical", "--cfg=contexts/guard-size:0"} {
  for (auto& argument : arguments_) pointers_.push_back(argument.data());
  pointers_.push_back(nullptr);
  argc_ = static_cast<int>(arguments_.size());
}

void configure_network_model(const Scenario& sc) {
  s4u::Engine::set_config("network/model:" + sc.network.model);
  if (sc.network.bandwidth_factor > 0)
    s4u::Engine::set_config("network/bandwidth-factor:" + number(sc.network.bandwidth_factor));
  if (sc.network.latency_factor > 0)
    s4u::Engine::set_config("network/latency-factor:" + number(sc.network.latency_factor));
  if (sc.network.tcp_gamma > 0) s4u::Engine::set_config("network/TCP-gamma:" + number(sc.network.tcp_gamma));
}

Platform build_platform(const Scenario& sc) {
  Platform platform;
  auto [bw_factor, lat_factor] = model_factors(sc.network.model);
  platform.bandwidth_factor = sc.network.bandwidth_factor > 0 ? sc.network.bandwidth_factor : bw_factor;
  platform.latency_factor = sc.network.latency_factor > 0 ? sc.network.latency_factor : lat_factor;
  // The FIFO model queues frames at links whose rate bandwidth_factor already reduces to TCP payload
  // (ACKs included, docs/FIDELITY.md): it charges no reverse-path share on top.
  platform.cross_traffic =
      sc.sim.network_model != "fifo" && simgrid::config::get_value<bool>("network/crosstraffic")
          ? kCrossTraffic
          : 0;

  const int host_count = sc.host_count();
  if (sc.cluster.topology == Topology::kStar) {
    auto* zone = s4u::create_star_zone("cluster");
    s4u::Link* backbone = nullptr;
    if (sc.cluster.switch_bandwidth_Bps > 0) {
      backbone = zone->create_link("switch", sc.cluster.switch_bandwidth_Bps)->seal();
      platform.links.push_back({"switch", sc.cluster.switch_bandwidth_Bps});
      platform.has_switch = true;
    }
    for (int h = 0; h < host_count; ++h) add_host(zone, sc, sc.host_name(h), platform, backbone);
    zone->seal();
    return platform;
  }
  auto* core = s4u::create_star_zone("core");
  for (int r = 0; r < sc.cluster.racks; ++r) {
    const std::string rack_name = "rack" + std::to_string(r);
    auto* rack = s4u::create_star_zone(rack_name);
    rack->set_parent(core);
    auto* tor = rack->create_router(rack_name + ".tor");
    for (int h = r; h < host_count; h += sc.cluster.racks) {
      add_host(rack, sc, sc.host_name(h), platform);
      platform.rack_of[sc.host_name(h)] = r;
    }
    rack->seal();
    auto* uplink = core->create_split_duplex_link(rack_name + ".uplink", sc.cluster.rack_uplink_bandwidth_Bps)
                       ->set_latency(sc.cluster.rack_uplink_latency_s)
                       ->seal();
    core->add_route(rack->get_netpoint(), nullptr, tor, nullptr,
                    {s4u::LinkInRoute(uplink, s4u::LinkInRoute::Direction::UP)}, true);
    platform.links.push_back({rack_name + ".up", sc.cluster.rack_uplink_bandwidth_Bps});
    platform.links.push_back({rack_name + ".down", sc.cluster.rack_uplink_bandwidth_Bps});
  }
  core->seal();
  return platform;
}

s4u::ActorPtr create_actor(const std::string& name, s4u::Host* host, const std::function<void()>& code) {
  const int stack_bytes = simgrid::config::get_value<int>("contexts/stack-size") * 1024;
  mallopt(M_MMAP_THRESHOLD, stack_bytes);
  auto actor = s4u::Actor::create(name, host, code);
  mallopt(M_MMAP_THRESHOLD, kLargeBlockBytes);
  mallopt(M_TRIM_THRESHOLD, kTrimBytes);
  return actor;
}

}  // namespace pstwin::sim
