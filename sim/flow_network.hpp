// pstwin's own flow-level network model (sim.network_model = "flow"): the bandwidth sharing of
// SimGrid's CM02/LV08 models (weighted max-min: a flow of sharing penalty p gets level/p on the
// link that bottlenecks it; penalty = route latency + weight-S / bandwidth per link; cross traffic
// charges 0.05 of a flow's rate to its reverse route; rate capped at TCP-gamma / (2 x latency);
// a flow first waits latency x latency factor), solved incrementally: a flow's start or end
// re-levels only the links it touches and, while levels keep moving, their neighbours. Each link
// keeps a virtual clock (the integral of its level), so the flows it bottlenecks finish in
// virtual-time order without touching every flow when the level changes.
// Time stays SimGrid's: one daemon actor sleeps until the next latency end, timer or completion,
// and runs the callbacks then (the senders need no actor of their own).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>
#include <simgrid/s4u.hpp>

#include "sim/message_network.hpp"

namespace pstwin::sim {

// The solver, independent of SimGrid (unit-tested against the exact progressive filling).
class MaxMinFlows {
 public:
  static constexpr double kUnbounded = std::numeric_limits<double>::infinity();
  struct Use {
    int link;
    double weight;  // bytes on this link per byte of the flow (1, or the cross-traffic share)
  };

  int add_link(double capacity);  // bytes per second; returns the link's index
  // A flow of `bytes` over `uses`, rate <= bound; joins the sharing at `now`. Returns its id.
  std::uint64_t add_flow(double now, double bytes, double penalty, double bound,
                         const std::vector<Use>& uses);
  // Earliest completion as (time, flow id); time is infinity if no flow is in progress.
  std::pair<double, std::uint64_t> next_completion() const;
  void remove_flow(double now, std::uint64_t id);  // completed (or abandoned) at `now`
  double rate(std::uint64_t id) const;
  double remaining(double now, std::uint64_t id) const;
  std::size_t flows() const { return active_; }
  // Rates by progressive filling from scratch (the reference the incremental solver must match).
  std::map<std::uint64_t, double> exact_rates() const;

 private:
  struct Flow {
    bool active = false;
    double penalty = 1;
    double bound = kUnbounded;
    // Inline: water filling reads every flow of a link at each event, and a route has at most
    // eight links with its cross traffic (two-tier, both directions).
    boost::container::small_vector<Use, 8> uses;
    int bottleneck = -1;    // link index, -1: capped by its own bound, -2: not placed yet
    double finish = 0;      // bottleneck's virtual time at completion, or absolute time (bound)
    double bound_rate = 0;  // rate while capped by its bound
  };
  // A flow as one of its links sees it.
  struct Member {
    static constexpr std::uint8_t kSpilled = 0xff;  // more other links than fit: read its Flow
    static constexpr std::uint8_t kGone = 0xfe;     // the count of a hole (id kHole)
    static constexpr std::uint64_t kHole = std::numeric_limits<std::uint64_t>::max();  // id of a flow gone
    std::uint64_t id = 0;
    double share = 0;    // this link's weight / penalty: the flow's rate per unit of level
    double own_cap = 0;  // bound x penalty: the level above which its bound holds it
    std::uint8_t count = 0;
    bool unit = false;  // its weight on each other link is 1 (no cross traffic, no shared link)
    // Its other links; with one to three, the last repeats up to others[2], so water filling takes
    // the minimum of three levels without a loop (a minimum is exact in any order).
    std::array<int, 7> others{};
    // Its penalty: with `unit`, relevel spends a neighbour's slack without reading the flow's record
    // (a cache miss per member of a busy server link at 8192 workers).
    double penalty = 1;
  };
  struct Link {
    double capacity = 0;
    double level = kUnbounded;  // a flow of penalty p gets level / p here (infinite: not saturated)
    double clock = 0;           // integral of level over time, up to `updated`
    double updated = 0;
    bool queued = false;
    // Every flow using it, in the order they joined; a flow that left is a hole (kHole) until holes
    // outnumber flows: erasing in place moved the rest of a busy server link's list at every end.
    std::vector<std::uint64_t> flows;
    std::size_t holes = 0;
    // What water filling reads of each flow, in the order of `flows` (the sums' order, so results
    // stay bit for bit), packed: reading it through `flows_` cost a cache miss per flow.
    std::vector<Member> members;
    std::set<std::pair<double, std::uint64_t>> done;  // bottlenecked flows by virtual finish
  };
  void advance(Link& link, double now);
  double water_level(int link, double& slack) const;  // slack: as slack_, 0 when saturated
  static double level_of(double capacity, double used, double weight, std::size_t left);
  double cap_level(const Flow& flow, int except) const;
  double cap_elsewhere(const Member& member, int index) const;
  void relevel(double now, std::uint64_t fresh);  // after the links in dirty_ gained or lost flows
  std::vector<double> exact_levels() const;
  void place(double now, std::uint64_t id, Flow& flow, double remaining);
  double remaining_of(double now, const Flow& flow) const;
  void refresh_completion(int link);

  std::vector<Link> links_;
  std::vector<double> level_;  // links_[i].level, packed: what water filling reads most
  // By link, packed as level_: while unsaturated, a lower bound on capacity minus the demand of its
  // flows at their caps. A neighbour's rising level spends it; only when it runs out can this link
  // fill, so only then is it re-levelled (with many flows, almost every neighbour of a moved level
  // stays unsaturated).
  std::vector<double> slack_;
  std::vector<Flow> flows_;          // by id; ids of finished flows are reused, lowest first
  std::vector<std::uint64_t> seen_;  // by flow id: the last relevel pass that touched it
  // By flow id: Flow::bottleneck, packed: relevel reads it for every flow of a moved link.
  std::vector<int> bottleneck_;
  std::set<std::uint64_t> free_ids_;
  std::size_t active_ = 0;
  std::set<std::pair<double, std::uint64_t>> bound_done_;  // flows capped by their bound: (time, id)
  std::set<std::pair<double, int>> link_done_;             // (next completion, link)
  std::vector<double> link_next_;                          // each link's entry in link_done_
  std::uint64_t pass_ = 0;
  mutable std::vector<std::pair<double, double>> scratch_;
  struct Group {
    double cap;
    double weight;
    std::size_t count;
  };
  mutable std::vector<Group> groups_;  // water_level's distinct (cap, weight) pairs
  // relevel's working lists, kept between calls: it runs twice per message.
  std::vector<int> dirty_;
  std::vector<int> refresh_;
  std::vector<std::uint64_t> touched_;
  std::vector<int> queue_;
};

// Drives MaxMinFlows from SimGrid: routes and parameters from the platform, completions in
// simulated time. Callbacks run on the network's own actor, in (time, call order) order; they may
// start flows and timers, but must not block.
class FlowNetwork final : public DaemonNetwork {
 public:
  FlowNetwork(double bandwidth_factor, double latency_factor, bool cross_traffic, simgrid::s4u::Host* home);
  // A flow has no queue: `sent` is not called, `done` runs when the last byte arrived.
  void start(simgrid::s4u::Host* from, simgrid::s4u::Host* to, double bytes, std::function<void()> sent,
             std::function<void()> done, double max_rate = kUnbounded, double latency_paid = 0) override;
  bool separates_sent() const override { return false; }

 private:
  struct Route {
    double latency = 0;  // SimGrid's: sum of link latencies, before the latency factor
    double penalty = 1;
    double bound = MaxMinFlows::kUnbounded;
    std::vector<MaxMinFlows::Use> uses;
  };
  const Route& route(simgrid::s4u::Host* from, simgrid::s4u::Host* to);
  int link_index(const simgrid::s4u::Link* link);
  double next_model_event() const override { return solver_.next_completion().first; }
  void run_model_until(double now) override;  // flows completed by then

  double bandwidth_factor_;
  double latency_factor_;
  bool cross_traffic_;
  double weight_s_;
  double tcp_gamma_;
  MaxMinFlows solver_;
  // By SimGrid's link: looked up once per link of each new route (a million routes at 8192 workers x
  // 64 servers), never iterated. Keyed by name it compared strings at every lookup.
  std::unordered_map<const simgrid::s4u::Link*, int> link_ids_;
  // By (from, to): looked up once per flow, never iterated, so hashed (the key's order decides
  // nothing). Elements stay where they are: a starting flow holds its route by reference.
  struct HostPairHash {
    std::size_t operator()(const std::pair<const simgrid::s4u::Host*, const simgrid::s4u::Host*>& key) const {
      const std::hash<const void*> hash;
      return hash(key.first) * 31 + hash(key.second);
    }
  };
  std::unordered_map<std::pair<const simgrid::s4u::Host*, const simgrid::s4u::Host*>, Route, HostPairHash>
      routes_;
  std::vector<std::function<void()>> waiting_;  // by flow id: its completion
  // Flows paying their route's latency, in slots reused as they join the sharing: the timer's closure
  // holds only a slot, small enough for std::function's own buffer (no allocation per flow).
  struct Starting {
    double bytes = 0;
    const Route* path = nullptr;
    std::function<void()> done;
    double max_rate = kUnbounded;
  };
  std::vector<Starting> starting_;
  std::vector<std::uint32_t> free_starting_;
};

}  // namespace pstwin::sim
