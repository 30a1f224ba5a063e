// Builds the SimGrid platform a scenario describes: star (every host's NIC to one switch) or
// two-tier (hosts to a rack switch, racks to a core switch). NICs and rack uplinks are split-duplex.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <simgrid/forward.h>

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

// s4u::Actor::create, with the actor's stack out of the heap. SimGrid callocs each stack (without
// guard pages). A block at or above glibc's mmap threshold is fresh mapped memory, resident only as
// deep as the actor's stack grows; below it, heap memory that calloc zeroes, all of it resident.
// glibc raises that threshold to the size of the largest mapped block freed so far, so once setup
// freed one above the stack size every later stack came from the heap (4,096 workers x 64 servers:
// 2.3 GiB resident for stacks of 256 KiB). Here the threshold is the stack size while SimGrid
// allocates the stack, then glibc's highest (32 MiB, the heap trimmed above 64 MiB), so large
// payload buffers are reused as after glibc's own raise instead of being mapped each time.
simgrid::s4u::ActorPtr create_actor(const std::string& name, simgrid::s4u::Host* host,
                                    const std::function<void()>& code);

// Sets the network-model configuration; call before build_platform, on a fresh engine.
void configure_network_model(const Scenario& scenario);
Platform build_platform(const Scenario& scenario);

}  // namespace pstwin::sim
