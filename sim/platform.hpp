// Builds the SimGrid platform a scenario describes: star (every host's NIC to one switch) or
// two-tier (hosts to a rack switch, racks to a core switch). NICs and rack uplinks are split-duplex.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "scenario/scenario.hpp"

namespace simgrid::s4u {
class Host;
}

namespace pstwin::sim {

struct SimLink {
  std::string name;  // "h3.up", "h3.down", "rack1.up", ...
  double bandwidth_Bps = 0;
};

struct Platform {
  std::map<std::string, simgrid::s4u::Host*> hosts;
  std::map<std::string, int> rack_of;  // two-tier only
  bool has_switch = false;             // star with cluster.switch_bandwidth: the link "switch"
  std::vector<SimLink> links;          // every link whose bytes are accounted
  double bandwidth_factor = 1;         // the network model's effective factors
  double latency_factor = 1;
  double cross_traffic = 0;  // reverse-path share of each flow
};

// The engine's command line (program name first): logs only on critical errors, no stack guard pages.
// SimGrid's thread contexts, which ASan could follow better than its swapped stacks, deadlock when a
// killed actor's unwinding releases an s4u::Mutex (SimGrid 3.32): every build keeps the default.
class EngineArguments {
 public:
  explicit EngineArguments(std::string program);
  EngineArguments(const EngineArguments&) = delete;
  EngineArguments& operator=(const EngineArguments&) = delete;
  int* argc() { return &argc_; }
  char** argv() { return pointers_.data(); }

 private:
  std::vector<std::string> arguments_;
  std::vector<char*> pointers_;  // into arguments_, then nullptr
  int argc_ = 0;
};

// Sets the network-model configuration; call before build_platform, on a fresh engine.
void configure_network_model(const Scenario& scenario);
Platform build_platform(const Scenario& scenario);

}  // namespace pstwin::sim
