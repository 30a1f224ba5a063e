#include "sim/flow_network.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <xbt/config.hpp>

namespace pstwin::sim {
namespace s4u = simgrid::s4u;

namespace {
constexpr double kInf = MaxMinFlows::kUnbounded;
constexpr std::uint64_t kNoFlow = std::numeric_limits<std::uint64_t>::max();
// SimGrid's network/crosstraffic share of a flow charged to its reverse route.
constexpr double kCrossTrafficShare = 0.05;
// Completions this close to the clock are due: SimGrid's own time precision.
constexpr double kTimeEpsilon = 1e-9;
// Water filling groups a link's flows by (cap, weight) when they have at most this many distinct pairs
// (a server link's hundreds of flows have one or two: same rack or not).
constexpr std::size_t kMaxGroups = 8;

bool same_level(double a, double b) {
  if (std::isinf(a) || std::isinf(b)) return std::isinf(a) && std::isinf(b);
  return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b));
}
}  // namespace

// ---------------------------------------------------------------- MaxMinFlows

int MaxMinFlows::add_link(double capacity) {
  links_.push_back({});
  links_.back().capacity = capacity;
  level_.push_back(kInf);
  slack_.push_back(0);
  link_next_.push_back(kInf);
  return static_cast<int>(links_.size()) - 1;
}

std::uint64_t MaxMinFlows::add_flow(double now, double bytes, double penalty, double bound,
                                    const std::vector<Use>& uses) {
  std::uint64_t id = flows_.size();
  if (!free_ids_.empty()) {
    id = *free_ids_.begin();
    free_ids_.erase(free_ids_.begin());
  } else {
    flows_.emplace_back();
    seen_.push_back(0);
    bottleneck_.push_back(-2);
  }
  ++active_;
  Flow& flow = flows_[id];
  // A reused id keeps its uses' storage: a flow per message would otherwise allocate each time.
  flow.uses.assign(uses.begin(), uses.end());
  // One entry per link (a route and its reverse could share one).
  std::sort(flow.uses.begin(), flow.uses.end(), [](const Use& a, const Use& b) { return a.link < b.link; });
  std::size_t kept = 0;
  for (const auto& use : flow.uses) {
    if (kept > 0 && flow.uses[kept - 1].link == use.link)
      flow.uses[kept - 1].weight += use.weight;
    else
      flow.uses[kept++] = use;
  }
  flow.uses.resize(kept);
  flow.active = true;
  flow.penalty = penalty;
  flow.bound = bound;
  flow.bottleneck = -2;  // not placed yet; `finish` holds its bytes
  bottleneck_[id] = -2;
  flow.finish = bytes;
  flow.bound_rate = 0;
  seen_[id] = 0;
  dirty_.clear();
  const bool spilled = flow.uses.size() > Member{}.others.size() + 1;
  for (const auto& use : flow.uses) {
    Link& link = links_[static_cast<std::size_t>(use.link)];
    link.flows.push_back(id);
    Member member{id, use.weight / flow.penalty, flow.bound * flow.penalty, 0, false, {}, flow.penalty};
    if (spilled) {
      member.count = Member::kSpilled;
    } else {
      member.unit = true;
      for (const auto& other : flow.uses) {
        if (other.link == use.link) continue;
        member.others[member.count++] = other.link;
        member.unit = member.unit && other.weight == 1.0;
      }
      for (std::size_t k = member.count; k > 0 && k < 3; ++k) member.others[k] = member.others[k - 1];
    }
    link.members.push_back(member);
  }
  for (const auto& use : flow.uses) dirty_.push_back(use.link);
  relevel(now, id);
  return id;
}

std::pair<double, std::uint64_t> MaxMinFlows::next_completion() const {
  std::pair<double, std::uint64_t> best{kInf, 0};
  if (!link_done_.empty()) {
    const auto [time, link] = *link_done_.begin();
    best = {time, links_[static_cast<std::size_t>(link)].done.begin()->second};
  }
  if (!bound_done_.empty() && *bound_done_.begin() < best) best = *bound_done_.begin();
  return best;
}

void MaxMinFlows::remove_flow(double now, std::uint64_t id) {
  if (id >= flows_.size() || !flows_[id].active) return;
  Flow& flow = flows_[id];
  if (flow.bottleneck == -1) {
    bound_done_.erase({flow.finish, id});
  } else if (flow.bottleneck >= 0) {
    links_[static_cast<std::size_t>(flow.bottleneck)].done.erase({flow.finish, id});
    refresh_completion(flow.bottleneck);
  }
  dirty_.clear();
  for (const auto& use : flow.uses) {
    Link& link = links_[static_cast<std::size_t>(use.link)];
    const auto at = std::find(link.flows.begin(), link.flows.end(), id) - link.flows.begin();
    link.flows[static_cast<std::size_t>(at)] = Member::kHole;
    link.members[static_cast<std::size_t>(at)].id = Member::kHole;
    link.members[static_cast<std::size_t>(at)].count = Member::kGone;
    // Close the holes once they outnumber the flows, keeping the flows' order (water filling sums in
    // it): linear work once per as many ends as there are flows.
    if (++link.holes > link.flows.size() / 2) {
      std::erase(link.flows, Member::kHole);
      std::erase_if(link.members, [](const Member& member) { return member.id == Member::kHole; });
      link.holes = 0;
    }
    dirty_.push_back(use.link);
  }
  flow.active = false;
  flow.uses.clear();
  free_ids_.insert(id);
  --active_;
  relevel(now, kNoFlow);
}

double MaxMinFlows::rate(std::uint64_t id) const {
  const Flow& flow = flows_.at(id);
  if (flow.bottleneck == -1) return flow.bound_rate;
  return links_[static_cast<std::size_t>(flow.bottleneck)].level / flow.penalty;
}

double MaxMinFlows::remaining(double now, std::uint64_t id) const {
  return remaining_of(now, flows_.at(id));
}

void MaxMinFlows::advance(Link& link, double now) {
  if (!std::isinf(link.level)) link.clock += link.level * (now - link.updated);
  link.updated = now;
}

double MaxMinFlows::cap_level(const Flow& flow, int except) const {
  double cap = flow.bound * flow.penalty;
  for (const auto& use : flow.uses)
    if (use.link != except) cap = std::min(cap, links_[static_cast<std::size_t>(use.link)].level);
  return cap;
}

// The lowest level of the member's other links (infinity: none), NaN for a hole.
__attribute__((always_inline)) inline double MaxMinFlows::cap_elsewhere(const Member& member,
                                                                        int index) const {
  const unsigned count = member.count;
  const auto level = [this](int link) { return level_[static_cast<std::size_t>(link)]; };
  if (count - 1 < 3)
    return std::min(level(member.others[0]), std::min(level(member.others[1]), level(member.others[2])));
  if (count == Member::kGone) return std::numeric_limits<double>::quiet_NaN();
  double cap = kInf;
  if (count == Member::kSpilled) {
    for (const auto& use : flows_[member.id].uses)
      if (use.link != index) cap = std::min(cap, level(use.link));
  } else {
    for (unsigned k = 0; k < count; ++k) cap = std::min(cap, level(member.others[k]));
  }
  return cap;
}

// The level at which this link saturates, given the level at which each of its flows is capped
// elsewhere (its other links or its bound): water filling over the link's flows.
double MaxMinFlows::water_level(int index, double& slack) const {
  const Link& link = links_[static_cast<std::size_t>(index)];
  slack = 0;
  auto& capped = scratch_;  // (cap level, weight / penalty), in the order of the members
  if (capped.size() < link.members.size()) capped.resize(link.members.size());
  std::size_t n = 0;  // capped[0, n) is in use
  double free_weight = 0;
  double demand = 0;  // in the members' order
  for (const Member& member : link.members) {
    const double weight = member.share;
    const double elsewhere = cap_elsewhere(member, index);
    if (std::isnan(elsewhere)) continue;  // a hole
    const double cap = std::min(member.own_cap, elsewhere);
    if (std::isinf(cap)) {
      free_weight += weight;
    } else {
      capped[n++] = {cap, weight};
      demand += weight * cap;
    }
  }
  if (free_weight == 0) {
    // Common case for a wide uplink: every flow is held below it elsewhere and it cannot fill.
    if (demand < link.capacity) {
      // Kept a hair under the exact slack so that rounding in what is spent never hides a fill.
      slack = (link.capacity - demand) * (1 - 1e-9);
      return kInf;
    }
  }
  double weight = free_weight;
  std::size_t left = n + (free_weight > 0 ? 1 : 0);  // groups not yet capped
  double used = 0;
  // The sums below run over the pairs in sorted order. A server link's hundreds of flows have one or
  // two distinct pairs (same rack or not): counting them and sorting the few groups gives the same
  // sequence as sorting every pair (equal pairs are equal), for a fraction of the work.
  auto& groups = groups_;
  groups.clear();
  std::size_t last = 0;  // the group the previous pair joined: consecutive pairs usually agree
  bool grouped = true;
  for (std::size_t i = 0; i < n && grouped; ++i) {
    const auto [cap, w] = capped[i];
    if (last < groups.size() && groups[last].cap == cap && groups[last].weight == w) {
      ++groups[last].count;
      continue;
    }
    last = 0;
    while (last < groups.size() && !(groups[last].cap == cap && groups[last].weight == w)) ++last;
    if (last < groups.size())
      ++groups[last].count;
    else if (groups.size() < kMaxGroups)
      groups.push_back({cap, w, 1});
    else
      grouped = false;
  }
  if (grouped) {
    std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
      return a.cap != b.cap ? a.cap < b.cap : a.weight < b.weight;
    });
    for (const Group& group : groups)
      for (std::size_t i = 0; i < group.count; ++i) weight += group.weight;
    for (const Group& group : groups) {
      for (std::size_t i = 0; i < group.count; ++i) {
        if (used + weight * group.cap >= link.capacity) return level_of(link.capacity, used, weight, left);
        used += group.weight * group.cap;
        weight -= group.weight;
        --left;
      }
    }
    return level_of(link.capacity, used, weight, left);
  }
  // Usually still in order from the last call (three in four at 1024 workers): checking is cheaper
  // than sorting again.
  const auto end = capped.begin() + static_cast<std::ptrdiff_t>(n);
  if (!std::is_sorted(capped.begin(), end)) std::sort(capped.begin(), end);
  for (auto it = capped.begin(); it != end; ++it) weight += it->second;
  for (auto it = capped.begin(); it != end; ++it) {
    const auto [cap, w] = *it;
    if (used + weight * cap >= link.capacity) break;
    used += w * cap;
    weight -= w;
    --left;
  }
  return level_of(link.capacity, used, weight, left);
}

double MaxMinFlows::level_of(double capacity, double used, double weight, std::size_t left) {
  if (left == 0 || weight <= 0) return kInf;  // every flow is capped before this link fills
  return (capacity - used) / weight;
}

double MaxMinFlows::remaining_of(double now, const Flow& flow) const {
  if (flow.bottleneck == -2) return flow.finish;
  if (flow.bottleneck == -1) return std::max(0.0, (flow.finish - now) * flow.bound_rate);
  const Link& link = links_[static_cast<std::size_t>(flow.bottleneck)];
  const double clock = std::isinf(link.level) ? link.clock : link.clock + link.level * (now - link.updated);
  return std::max(0.0, (flow.finish - clock) / flow.penalty);
}

void MaxMinFlows::place(double now, std::uint64_t id, Flow& flow, double remaining) {
  if (flow.bottleneck == -1) {
    flow.bound_rate = flow.bound;
    flow.finish = std::isinf(flow.bound) ? now : now + remaining / flow.bound;
    bound_done_.insert({flow.finish, id});
    return;
  }
  Link& link = links_[static_cast<std::size_t>(flow.bottleneck)];
  advance(link, now);
  flow.finish = link.clock + remaining * flow.penalty;
  link.done.insert({flow.finish, id});
}

void MaxMinFlows::refresh_completion(int index) {
  Link& link = links_[static_cast<std::size_t>(index)];
  double& next = link_next_[static_cast<std::size_t>(index)];
  if (!std::isinf(next)) link_done_.erase({next, index});
  next = kInf;
  if (link.done.empty() || std::isinf(link.level) || link.level <= 0) return;
  next = link.updated + std::max(0.0, link.done.begin()->first - link.clock) / link.level;
  link_done_.insert({next, index});
}

void MaxMinFlows::relevel(double now, std::uint64_t fresh) {
  ++pass_;
  auto& refresh = refresh_;
  auto& touched = touched_;
  auto& queue = queue_;  // FIFO: read from `head`
  refresh.clear();
  touched.clear();
  queue.clear();
  std::size_t head = 0;
  auto touch = [&](std::uint64_t id) {
    if (seen_[id] == pass_) return;
    seen_[id] = pass_;
    touched.push_back(id);
  };
  // A flow's bottleneck only moves when one of its levels does (those touch it below), or when it
  // is new.
  if (fresh != kNoFlow) touch(fresh);
  for (const int index : dirty_) {
    refresh.push_back(index);
    if (!links_[static_cast<std::size_t>(index)].queued) {
      links_[static_cast<std::size_t>(index)].queued = true;
      queue.push_back(index);
    }
  }
  // Re-level links until none moves: a moved level changes the caps its flows' other links see.
  std::size_t steps = 0;
  const std::size_t step_limit = 64 * (links_.size() + 16);
  bool converged = true;
  while (head < queue.size()) {
    const int index = queue[head++];
    Link& link = links_[static_cast<std::size_t>(index)];
    link.queued = false;
    if (++steps > step_limit) {
      converged = false;
      continue;  // drain the queue, then solve exactly
    }
    const double level = water_level(index, slack_[static_cast<std::size_t>(index)]);
    const double old = link.level;
    if (same_level(level, old)) continue;
    advance(link, now);
    link.level = level;
    level_[static_cast<std::size_t>(index)] = level;
    refresh.push_back(index);
    const double low = std::min(level, old);
    // This level moved: does the flow `id`'s other link `other_index` need re-levelling?
    // Inlined: called for every other link of every flow of a moved link.
    auto propagate = [&](const Member& member, int other_index) __attribute__((always_inline)) {
      const double other_level = level_[static_cast<std::size_t>(other_index)];
      // A saturated link only sees this one if the flow may be capped below its level; an
      // unsaturated one can only fill up if this level rose, by more than its slack.
      bool matters = low < other_level;
      if (std::isinf(other_level) && level > old) {
        // The flow's cap rises by at most the rise of this level, its demand on `other` by that
        // times its weight there.
        double& slack = slack_[static_cast<std::size_t>(other_index)];
        if (std::isinf(level)) {
          slack -= kInf;
        } else if (member.unit) {
          slack -= (level - old) * 1.0 / member.penalty;
        } else {
          const Flow& flow = flows_[member.id];
          const auto use = std::ranges::find(flow.uses, other_index, &Use::link);
          slack -= (level - old) * use->weight / flow.penalty;
        }
        matters = !(slack > 0);
      } else if (std::isinf(other_level)) {
        matters = false;
      }
      Link& other = links_[static_cast<std::size_t>(other_index)];
      if (matters && !other.queued) {
        other.queued = true;
        queue.push_back(other_index);
      }
    };
    // A flow whose bottleneck this move cannot change is not touched: one held here stays if the level
    // fell, or rose no higher than its cap elsewhere (a tie keeps its bottleneck); one held elsewhere
    // stays if the level rose, or fell no lower than that cap. A later move of another of its levels
    // judges it again, so a flow left out still has its bottleneck by the final levels.
    const bool rose = level > old;
    for (const Member& member : link.members) {
      if (member.id == Member::kHole) continue;
      const bool here = bottleneck_[member.id] == index;
      if (member.count == Member::kSpilled) {
        if (rose == here) touch(member.id);
        for (const auto& use : flows_[member.id].uses)
          if (use.link != index) propagate(member, use.link);
      } else {
        // In the links' order, each once (others[] repeats its last link up to the third).
        switch (member.count) {
          case 3:
            propagate(member, member.others[0]);
            propagate(member, member.others[1]);
            propagate(member, member.others[2]);
            break;
          case 1:
            propagate(member, member.others[0]);
            break;
          default:
            for (std::uint8_t k = 0; k < member.count; ++k) propagate(member, member.others[k]);
        }
        if (rose == here) {
          const double cap = std::min(member.own_cap, cap_elsewhere(member, index));
          if (here ? level > cap : level < cap) touch(member.id);
        }
      }
    }
  }
  if (!converged) {
    // Local re-levelling did not settle: take every level from the exact solution.
    const auto levels = exact_levels();
    // Rises the drained queue never spent: no slack is known any more.
    std::ranges::fill(slack_, 0.0);
    for (std::size_t i = 0; i < links_.size(); ++i) {
      if (same_level(levels[i], links_[i].level)) continue;
      advance(links_[i], now);
      links_[i].level = levels[i];
      level_[i] = levels[i];
      refresh.push_back(static_cast<int>(i));
      for (const auto id : links_[i].flows)
        if (id != Member::kHole) touch(id);
    }
  }
  // Each touched flow follows the link (or bound) that now limits it.
  for (const auto id : touched) {
    Flow& flow = flows_[id];
    int bottleneck = -1;
    double best = flow.bound * flow.penalty;
    for (const auto& use : flow.uses) {
      const double level = level_[static_cast<std::size_t>(use.link)];
      if (level < best || (level == best && use.link == flow.bottleneck)) {
        best = level;
        bottleneck = use.link;
      }
    }
    if (bottleneck == flow.bottleneck) continue;
    const double left = remaining_of(now, flow);
    if (flow.bottleneck == -1) {
      bound_done_.erase({flow.finish, id});
    } else if (flow.bottleneck >= 0) {
      links_[static_cast<std::size_t>(flow.bottleneck)].done.erase({flow.finish, id});
      refresh.push_back(flow.bottleneck);
    }
    flow.bottleneck = bottleneck;
    bottleneck_[id] = bottleneck;
    place(now, id, flow, left);
    if (bottleneck >= 0) refresh.push_back(bottleneck);
  }
  std::sort(refresh.begin(), refresh.end());
  refresh.erase(std::unique(refresh.begin(), refresh.end()), refresh.end());
  for (const int index : refresh) refresh_completion(index);
}

std::vector<double> MaxMinFlows::exact_levels() const {
  std::vector<double> levels(links_.size(), kInf);
  std::vector<double> left(links_.size());
  for (std::size_t i = 0; i < links_.size(); ++i) left[i] = links_[i].capacity;
  std::set<std::uint64_t> unfixed;
  for (std::uint64_t id = 0; id < flows_.size(); ++id)
    if (flows_[id].active) unfixed.insert(id);
  auto fix = [&](std::uint64_t id, double rate) {
    for (const auto& use : flows_.at(id).uses) left[static_cast<std::size_t>(use.link)] -= use.weight * rate;
    unfixed.erase(id);
  };
  while (!unfixed.empty()) {
    double best = kInf;
    int best_link = -1;
    std::uint64_t best_flow = kNoFlow;
    for (std::size_t i = 0; i < links_.size(); ++i) {
      double weight = 0;
      for (const auto id : links_[i].flows)
        if (unfixed.count(id))
          for (const auto& use : flows_.at(id).uses)
            if (use.link == static_cast<int>(i)) weight += use.weight / flows_.at(id).penalty;
      if (weight <= 0) continue;
      const double level = std::max(0.0, left[i]) / weight;
      if (level < best) {
        best = level;
        best_link = static_cast<int>(i);
      }
    }
    for (const auto id : unfixed) {
      const Flow& flow = flows_.at(id);
      if (flow.bound * flow.penalty < best) {
        best = flow.bound * flow.penalty;
        best_link = -1;
        best_flow = id;
      }
    }
    if (best_link < 0 && best_flow == kNoFlow) break;  // nothing limits the rest (no links, no bound)
    if (best_link < 0) {
      fix(best_flow, flows_.at(best_flow).bound);
      continue;
    }
    levels[static_cast<std::size_t>(best_link)] = best;
    std::vector<std::uint64_t> on_link;
    for (const auto id : links_[static_cast<std::size_t>(best_link)].flows)
      if (unfixed.count(id)) on_link.push_back(id);
    for (const auto id : on_link) fix(id, best / flows_.at(id).penalty);
  }
  return levels;
}

std::map<std::uint64_t, double> MaxMinFlows::exact_rates() const {
  const auto levels = exact_levels();
  std::map<std::uint64_t, double> rates;
  for (std::uint64_t id = 0; id < flows_.size(); ++id) {
    const Flow& flow = flows_[id];
    if (!flow.active) continue;
    double level = flow.bound * flow.penalty;
    for (const auto& use : flow.uses) level = std::min(level, levels[static_cast<std::size_t>(use.link)]);
    rates[id] = level / flow.penalty;
  }
  return rates;
}

// ---------------------------------------------------------------- FlowNetwork

FlowNetwork::FlowNetwork(double bandwidth_factor, double latency_factor, bool cross_traffic, s4u::Host* home)
    : bandwidth_factor_(bandwidth_factor),
      latency_factor_(latency_factor),
      cross_traffic_(cross_traffic),
      weight_s_(simgrid::config::get_value<double>("network/weight-S")),
      tcp_gamma_(simgrid::config::get_value<double>("network/TCP-gamma")) {
  start_daemon("flow-network", home);
}

int FlowNetwork::link_index(const s4u::Link* link) {
  auto it = link_ids_.find(link);
  if (it == link_ids_.end())
    it = link_ids_.emplace(link, solver_.add_link(bandwidth_factor_ * link->get_bandwidth())).first;
  return it->second;
}

const FlowNetwork::Route& FlowNetwork::route(s4u::Host* from, s4u::Host* to) {
  const std::pair<const s4u::Host*, const s4u::Host*> key{from, to};
  if (auto it = routes_.find(key); it != routes_.end()) return it->second;
  Route route;
  std::vector<s4u::Link*> links;
  from->route_to(to, links, &route.latency);
  double penalty = route.latency;
  for (const auto* link : links) {
    route.bound = std::min(route.bound, bandwidth_factor_ * link->get_bandwidth());
    if (weight_s_ > 0) penalty += weight_s_ / link->get_bandwidth();
    // A FATPIPE link (loopback) limits each flow on its own; it shares nothing.
    if (link->get_sharing_policy() != s4u::Link::SharingPolicy::FATPIPE)
      route.uses.push_back({link_index(link), 1.0});
  }
  if (cross_traffic_) {
    std::vector<s4u::Link*> back;
    to->route_to(from, back, nullptr);
    for (const auto* link : back)
      if (link->get_sharing_policy() != s4u::Link::SharingPolicy::FATPIPE)
        route.uses.push_back({link_index(link), kCrossTrafficShare});
  }
  if (route.latency > 0) route.bound = std::min(route.bound, tcp_gamma_ / (2 * route.latency));
  // SimGrid shares by the penalty once the latency is paid; a flow with no latency gets 1.
  route.penalty = route.latency * latency_factor_ > 0 ? penalty : 1.0;
  return routes_.emplace(key, std::move(route)).first->second;
}

void FlowNetwork::start(s4u::Host* from, s4u::Host* to, double bytes, std::function<void()> /*sent*/,
                        std::function<void()> done, double max_rate, double latency_paid) {
  const Route& path = route(from, to);
  std::uint32_t slot = 0;
  if (free_starting_.empty()) {
    slot = static_cast<std::uint32_t>(starting_.size());
    starting_.emplace_back();
  } else {
    slot = free_starting_.back();
    free_starting_.pop_back();
  }
  starting_[slot] = {bytes, &path, std::move(done), max_rate};
  // The flow joins the sharing once its route's latency is paid, less what the caller pays itself (a
  // pipelined stream: the bytes pass first, the delivery follows a latency later).
  after(std::max(0.0, path.latency * latency_factor_ - latency_paid), [this, slot] {
    Starting flow = std::move(starting_[slot]);
    free_starting_.push_back(slot);
    const auto id = solver_.add_flow(s4u::Engine::get_clock(), flow.bytes, flow.path->penalty,
                                     std::min(flow.path->bound, flow.max_rate), flow.path->uses);
    if (id >= waiting_.size()) waiting_.resize(id + 1);
    waiting_[id] = std::move(flow.done);
  });
}

void FlowNetwork::run_model_until(double now) {
  while (true) {
    const auto [time, id] = solver_.next_completion();
    if (time > now + kTimeEpsilon) break;
    solver_.remove_flow(now, id);
    auto done = std::move(waiting_[id]);
    waiting_[id] = nullptr;
    done();
  }
}

}  // namespace pstwin::sim
