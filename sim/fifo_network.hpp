// pstwin's packet-level network model (sim.network_model = "fifo"): every link is a queue served at
// its rate, as tbf and a switch port are on a namespace cluster. A message is cut into packets of
// kPacketBytes; a host's NIC (the first link of its routes) takes turns among the messages its
// connections are sending, a packet each (what TCP small queues make of a host's FIFO), holding a
// paced message's packets to its rate; every later link (the switch, the receiver's port) serves
// packets in arrival order. A packet crosses a link in size / rate, then waits the link's latency.
// The flow model shares each link among flows at once and has no queues: it cannot show a message
// waiting behind another connection's packets, which is where real runs with many-to-many
// dependencies lose time (docs/FPT.md, "Namespace clusters"). There is no congestion control:
// what bounds the queues is the senders' credit. Header-only messages still cost only latency.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <simgrid/s4u.hpp>

#include "sim/message_network.hpp"

namespace pstwin::sim {

// The queues, independent of SimGrid (unit-tested on their own).
class FifoLinks {
 public:
  static constexpr double kPacketBytes = 1448;  // TCP payload of one Ethernet frame
  struct Hop {
    int link;
    double latency;  // seconds after the packet's last byte left this link
  };

  int add_link(double capacity);  // payload bytes per second; returns the link's index
  // Queues a message of `bytes` (> 0) over `hops` (at least one) at `now`, at most `max_rate` on the
  // first link. Its `sent` runs once its last packet left the first link, `done` once it arrived.
  void send(double now, std::vector<Hop> hops, double bytes, double max_rate, std::function<void()> sent,
            std::function<void()> done);
  // Time of the next event (infinity: nothing in flight).
  double next_event() const;
  // Handles every event due at or before `now` in (time, sequence) order, running callbacks as
  // their events come; callbacks may send more.
  void run_until(double now);
  double now() const { return now_; }  // the time of the event being handled (or of the last send)
  std::size_t messages() const { return messages_.size(); }
  double busy_seconds(int link) const { return links_.at(static_cast<std::size_t>(link)).busy_s; }

 private:
  struct Message {
    std::vector<Hop> hops;
    double unsent = 0;       // bytes not yet handed to the first link
    double undelivered = 0;  // bytes not yet arrived
    double max_rate = 0;
    double next_release = 0;  // pacing: the first link may take its next packet from then on
    std::function<void()> sent;
    std::function<void()> done;
  };
  struct Packet {
    std::uint64_t message;
    double bytes;
    std::size_t hop;  // index into the message's hops of the link it is at
  };
  struct Link {
    double capacity = 0;
    bool busy = false;
    double busy_s = 0;
    double wake_at = -1;                // a pacing wake-up already scheduled for this time
    std::deque<Packet> arrived;         // packets from an earlier link, in arrival order
    std::deque<std::uint64_t> senders;  // messages starting here, in turn order
  };
  enum class Kind { kLinkFree, kArrive, kSent, kWake };
  struct Event {
    Kind kind;
    int link = -1;
    Packet packet{};
    std::function<void()> sent;  // kSent
  };
  void schedule(double time, Event event);
  void try_start(double now, int link);
  void transmit(double now, int link, Packet packet);
  void arrive(double now, Packet packet);

  std::vector<Link> links_;
  std::map<std::uint64_t, Message> messages_;
  std::map<std::pair<double, std::uint64_t>, Event> events_;  // (time, sequence)
  std::uint64_t next_message_ = 0;
  std::uint64_t next_sequence_ = 0;
  double now_ = 0;
};

// Drives FifoLinks from SimGrid, as FlowNetwork drives its solver: routes and latencies from the
// platform, events in simulated time on one daemon actor.
class FifoNetwork final : public MessageNetwork {
 public:
  FifoNetwork(double bandwidth_factor, double latency_factor, simgrid::s4u::Host* home);
  void start(simgrid::s4u::Host* from, simgrid::s4u::Host* to, double bytes, std::function<void()> sent,
             std::function<void()> done, double max_rate = kUnbounded) override;
  void after(double delay, std::function<void()> fire) override;
  bool separates_sent() const override { return true; }

 private:
  struct Route {
    std::vector<FifoLinks::Hop> hops;  // empty: a loopback route, shared with nobody
    double latency = 0;                // loopback: the whole one-way latency
    double bound = kUnbounded;         // loopback: its rate
  };
  const Route& route(simgrid::s4u::Host* from, simgrid::s4u::Host* to);
  void run();

  double bandwidth_factor_;
  double latency_factor_;
  FifoLinks links_;
  std::map<std::string, int, std::less<>> link_ids_;
  std::map<std::pair<std::string, std::string>, Route> routes_;
  std::multimap<std::pair<double, std::uint64_t>, std::function<void()>> timers_;  // (time, sequence)
  std::uint64_t next_sequence_ = 0;
  simgrid::s4u::MutexPtr mutex_;
  simgrid::s4u::ConditionVariablePtr wake_;
};

}  // namespace pstwin::sim
