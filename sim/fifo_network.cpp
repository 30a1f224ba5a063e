#include "sim/fifo_network.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pstwin::sim {
namespace s4u = simgrid::s4u;

namespace {
// Events this close to the clock are due: SimGrid's own time precision.
constexpr double kTimeEpsilon = 1e-9;
// Bytes left below this are none (byte counts are whole numbers carried in doubles).
constexpr double kByteEpsilon = 0.5;
}  // namespace

// ---------------------------------------------------------------- FifoLinks

int FifoLinks::add_link(double capacity, double burst_bytes) {
  if (!(capacity > 0)) throw std::invalid_argument("FifoLinks: a link's capacity must be positive");
  if (!(burst_bytes >= 0)) throw std::invalid_argument("FifoLinks: a link's burst must be >= 0");
  links_.push_back({});
  links_.back().capacity = capacity;
  links_.back().burst = burst_bytes;
  links_.back().tokens = burst_bytes;
  return static_cast<int>(links_.size()) - 1;
}

void FifoLinks::send(double now, std::vector<Hop> hops, double bytes, double max_rate,
                     std::function<void()> sent, std::function<void()> done, int connection) {
  if (hops.empty() || !(bytes > 0)) throw std::invalid_argument("FifoLinks::send: needs a hop and bytes > 0");
  now_ = now;
  const auto id = next_message_++;
  const int first = hops.front().link;
  Message& message = messages_[id];
  message.hops = std::move(hops);
  message.unsent = bytes;
  message.undelivered = bytes;
  message.max_rate = max_rate > 0 ? max_rate : MessageNetwork::kUnbounded;
  message.next_release = now;
  message.sent = std::move(sent);
  message.done = std::move(done);
  if (options_.host_queue == HostQueue::kMessages) {
    auto [entry, fresh] = connections_.try_emplace(connection);
    Connection& conn = entry->second;
    if (fresh) conn.tokens = options_.pacing_burst_bytes;  // a new connection has been idle
    conn.waiting.push_back(id);
    if (conn.waiting.size() == 1 && !conn.wake_scheduled) release(now, connection);
    return;
  }
  links_.at(static_cast<std::size_t>(first)).senders.push_back(id);
  try_start(now, first);
}

void FifoLinks::release(double now, int connection) {
  Connection& conn = connections_.at(connection);
  while (!conn.waiting.empty()) {
    const auto id = conn.waiting.front();
    Message& message = messages_.at(id);
    if (!std::isinf(message.max_rate)) {
      conn.tokens =
          std::min(options_.pacing_burst_bytes, conn.tokens + (now - conn.updated) * message.max_rate);
      conn.updated = now;
      if (conn.tokens < -kByteEpsilon) {
        conn.wake_scheduled = true;
        schedule(now - conn.tokens / message.max_rate,
                 Event{.kind = Kind::kRelease, .link = connection, .packet = {}, .sent = {}});
        return;
      }
      conn.tokens -= message.unsent;
    }
    conn.waiting.pop_front();
    const int first = message.hops.front().link;
    Link& link = links_[static_cast<std::size_t>(first)];
    for (double left = message.unsent; left > kByteEpsilon; left -= kPacketBytes)
      link.arrived.push_back(Packet{id, std::min(kPacketBytes, left), 0});
    message.unsent = 0;
    schedule(now, Event{.kind = Kind::kSent, .sent = std::move(message.sent)});
    try_start(now, first);
  }
}

double FifoLinks::next_event() const {
  return events_.empty() ? MessageNetwork::kUnbounded : events_.begin()->first.first;
}

void FifoLinks::schedule(double time, Event event) {
  events_.emplace(std::make_pair(time, next_sequence_++), std::move(event));
}

void FifoLinks::run_until(double now) {
  while (!events_.empty() && events_.begin()->first.first <= now + kTimeEpsilon) {
    auto due = events_.extract(events_.begin());
    const double time = due.key().first;
    now_ = time;
    Event& event = due.mapped();
    switch (event.kind) {
      case Kind::kLinkFree:
        links_[static_cast<std::size_t>(event.link)].busy = false;
        try_start(time, event.link);
        break;
      case Kind::kArrive:
        arrive(time, event.packet);
        break;
      case Kind::kSent:
        if (event.sent) event.sent();
        break;
      case Kind::kRelease:
        connections_.at(event.link).wake_scheduled = false;
        release(time, event.link);
        break;
      case Kind::kWake:
        links_[static_cast<std::size_t>(event.link)].wake_at = -1;
        try_start(time, event.link);
        break;
    }
  }
}

void FifoLinks::try_start(double now, int index) {
  Link& link = links_[static_cast<std::size_t>(index)];
  if (link.busy) return;
  if (!link.arrived.empty()) {
    const Packet packet = link.arrived.front();
    link.arrived.pop_front();
    transmit(now, index, packet);
    return;
  }
  // The host's own messages take turns, a packet each; a paced one waits for its release time.
  double earliest = MessageNetwork::kUnbounded;
  for (std::size_t turn = 0, n = link.senders.size(); turn < n; ++turn) {
    const auto id = link.senders.front();
    link.senders.pop_front();
    Message& message = messages_.at(id);
    if (message.next_release > now + kTimeEpsilon) {
      earliest = std::min(earliest, message.next_release);
      link.senders.push_back(id);
      continue;
    }
    const double bytes = std::min(kPacketBytes, message.unsent);
    message.unsent -= bytes;
    if (!std::isinf(message.max_rate)) message.next_release = now + bytes / message.max_rate;
    if (message.unsent > kByteEpsilon)
      link.senders.push_back(id);
    else
      schedule(now + bytes / link.capacity, Event{.kind = Kind::kSent, .sent = std::move(message.sent)});
    transmit(now, index, Packet{id, bytes, 0});
    return;
  }
  if (!std::isinf(earliest) && link.wake_at != earliest) {
    link.wake_at = earliest;
    schedule(earliest, Event{.kind = Kind::kWake, .link = index, .packet = {}, .sent = {}});
  }
}

void FifoLinks::transmit(double now, int index, Packet packet) {
  Link& link = links_[static_cast<std::size_t>(index)];
  // tbf: the packet waits until the bucket holds its bytes (without a bucket: its serialisation).
  link.tokens = std::min(link.burst, link.tokens + (now - link.refilled) * link.capacity);
  const double seconds = std::max(0.0, (packet.bytes - link.tokens) / link.capacity);
  link.tokens += seconds * link.capacity - packet.bytes;
  link.refilled = now + seconds;
  link.busy = true;
  link.busy_s += packet.bytes / link.capacity;
  const double latency = messages_.at(packet.message).hops[packet.hop].latency;
  schedule(now + seconds, Event{.kind = Kind::kLinkFree, .link = index, .packet = {}, .sent = {}});
  schedule(now + seconds + latency, Event{.kind = Kind::kArrive, .link = -1, .packet = packet, .sent = {}});
}

void FifoLinks::arrive(double now, Packet packet) {
  auto it = messages_.find(packet.message);
  Message& message = it->second;
  if (++packet.hop < message.hops.size()) {
    const int next = message.hops[packet.hop].link;
    links_[static_cast<std::size_t>(next)].arrived.push_back(packet);
    try_start(now, next);
    return;
  }
  message.undelivered -= packet.bytes;
  if (message.undelivered > kByteEpsilon) return;
  auto done = std::move(message.done);
  messages_.erase(it);
  if (done) done();
}

// ---------------------------------------------------------------- FifoNetwork

FifoNetwork::FifoNetwork(double bandwidth_factor, double latency_factor, s4u::Host* home,
                         FifoLinks::Options options)
    : bandwidth_factor_(bandwidth_factor),
      latency_factor_(latency_factor),
      link_burst_s_(options.link_burst_s),
      link_burst_min_bytes_(options.link_burst_min_bytes),
      links_(options) {
  start_daemon("fifo-network", home);
}

const FifoNetwork::Route& FifoNetwork::route(s4u::Host* from, s4u::Host* to) {
  const auto key = std::make_pair(from->get_name(), to->get_name());
  if (auto it = routes_.find(key); it != routes_.end()) return it->second;
  Route route;
  route.connection = static_cast<int>(routes_.size());
  std::vector<s4u::Link*> links;
  from->route_to(to, links, nullptr);
  for (const auto* link : links) {
    const double latency = link->get_latency() * latency_factor_;
    // A FATPIPE link (loopback) limits each message on its own: no queue.
    if (link->get_sharing_policy() == s4u::Link::SharingPolicy::FATPIPE) {
      route.latency += latency;
      route.bound = std::min(route.bound, bandwidth_factor_ * link->get_bandwidth());
      continue;
    }
    auto id = link_ids_.find(link->get_name());
    if (id == link_ids_.end())
      id = link_ids_
               .emplace(link->get_name(),
                        links_.add_link(bandwidth_factor_ * link->get_bandwidth(),
                                        link_burst_s_ > 0 ? std::max(link_burst_min_bytes_,
                                                                     link_burst_s_ * link->get_bandwidth()) *
                                                                bandwidth_factor_
                                                          : 0))
               .first;
    route.hops.push_back({id->second, latency});
  }
  if (!route.hops.empty()) route.hops.back().latency += route.latency;  // a FATPIPE's latency beside queues
  return routes_.emplace(key, std::move(route)).first->second;
}

void FifoNetwork::start(s4u::Host* from, s4u::Host* to, double bytes, std::function<void()> sent,
                        std::function<void()> done, double max_rate, double /*latency_paid*/) {
  const Route& path = route(from, to);
  const double now = s4u::Engine::get_clock();
  if (path.hops.empty()) {
    const double rate = std::min(path.bound, max_rate);
    const double seconds = path.latency + (std::isinf(rate) ? 0 : bytes / rate);
    after(seconds, [sent = std::move(sent), done = std::move(done)] {
      if (sent) sent();
      if (done) done();
    });
    return;
  }
  links_.send(now, path.hops, bytes, max_rate, std::move(sent), std::move(done), path.connection);
  wake();
}

}  // namespace pstwin::sim
