// pstwin's packet-level network model (sim.network_model = "fifo"): every link is a queue served at
// its rate, as tbf and a switch port are on a namespace cluster. A message is cut into packets of
// kPacketBytes; a host's NIC (the first link of its routes) takes its connections' messages whole in
// the order they are released, or takes turns among them a packet each (HostQueue); every later link
// (the switch, the receiver's port) serves packets in arrival order. A packet crosses a link in size /
// rate (less what the link's token bucket holds, as tbf's), then waits the link's latency.
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

  // How a host hands its connections' messages to its NIC (the first link of their routes).
  enum class HostQueue {
    // The NIC takes turns among the messages, a packet each; a paced message's packets are held to
    // its rate. `sent`: the last packet left the NIC.
    kTurns,
    // Linux as measured on a namespace cluster (docs/FPT.md, "The twin with queues"): a message
    // enters the host's FIFO whole when its connection releases it (the socket takes it whole and
    // TCP hands it on), and the NIC serves that FIFO in order. An unpaced connection releases at once;
    // a paced one is a token bucket at its rate, `pacing_burst_bytes` deep, that releases a whole
    // message whenever it is not in debt (0: a message, then its size at the rate: the epoll van's
    // own pacing). `sent`: the message is in the host's queue.
    kMessages,
  };
  struct Options {
    HostQueue host_queue = HostQueue::kTurns;
    double pacing_burst_bytes = 0;
    // FifoNetwork: every link a token bucket of max(link_burst_min_bytes, link_burst_s x its rate)
    // (tbf's bucket on a namespace cluster: 1 ms, at least 16 KB); 0: none.
    double link_burst_s = 0;
    double link_burst_min_bytes = 0;
  };
  FifoLinks() = default;
  explicit FifoLinks(Options options) : options_(options) {}

  // `capacity` in payload bytes per second; `burst_bytes` > 0 makes the link a token bucket of that
  // depth, as tbf is (a packet leaves at once while the bucket holds its bytes). Returns its index.
  int add_link(double capacity, double burst_bytes = 0);
  // Queues a message of `bytes` (> 0) over `hops` (at least one) at `now`, at most `max_rate` on the
  // first link, on connection `connection` (its messages leave in order; the kKernel queue's pacing
  // state). Its `sent` runs as Options::host_queue says, `done` once its last packet arrived.
  void send(double now, std::vector<Hop> hops, double bytes, double max_rate, std::function<void()> sent,
            std::function<void()> done, int connection = -1);
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
    double burst = 0;  // token bucket depth (0: none, a packet takes size / capacity)
    double tokens = 0;
    double refilled = 0;  // time the bucket was last brought up to date
    bool busy = false;
    double busy_s = 0;
    double wake_at = -1;                // a pacing wake-up already scheduled for this time
    std::deque<Packet> arrived;         // packets from an earlier link, in arrival order
    std::deque<std::uint64_t> senders;  // messages starting here, in turn order
  };
  struct Connection {  // kMessages: messages not yet released, and the pacing bucket
    std::deque<std::uint64_t> waiting;
    double tokens = 0;
    double updated = 0;
    bool wake_scheduled = false;
  };
  enum class Kind { kLinkFree, kArrive, kSent, kWake, kRelease };
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
  void release(double now, int connection);

  Options options_;
  std::vector<Link> links_;
  std::map<std::uint64_t, Message> messages_;
  std::map<int, Connection> connections_;
  std::map<std::pair<double, std::uint64_t>, Event> events_;  // (time, sequence)
  std::uint64_t next_message_ = 0;
  std::uint64_t next_sequence_ = 0;
  double now_ = 0;
};

// Drives FifoLinks from SimGrid, as FlowNetwork drives its solver: routes and latencies from the
// platform, events in simulated time on one daemon actor.
class FifoNetwork final : public DaemonNetwork {
 public:
  FifoNetwork(double bandwidth_factor, double latency_factor, simgrid::s4u::Host* home,
              FifoLinks::Options options = {});
  void start(simgrid::s4u::Host* from, simgrid::s4u::Host* to, double bytes, std::function<void()> sent,
             std::function<void()> done, double max_rate = kUnbounded, double latency_paid = 0) override;
  bool separates_sent() const override { return true; }

 private:
  struct Route {
    std::vector<FifoLinks::Hop> hops;  // empty: a loopback route, shared with nobody
    double latency = 0;                // loopback: the whole one-way latency
    double bound = kUnbounded;         // loopback: its rate
    int connection = 0;                // one per (sender, receiver) host pair
  };
  const Route& route(simgrid::s4u::Host* from, simgrid::s4u::Host* to);
  double next_model_event() const override { return links_.next_event(); }
  void run_model_until(double now) override { links_.run_until(now); }

  double bandwidth_factor_;
  double latency_factor_;
  double link_burst_s_;
  double link_burst_min_bytes_;
  FifoLinks links_;
  std::map<std::string, int, std::less<>> link_ids_;
  std::map<std::pair<std::string, std::string>, Route> routes_;
};

}  // namespace pstwin::sim
