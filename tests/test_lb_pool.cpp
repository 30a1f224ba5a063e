// FPT's traffic shaping inside the simulator, real SimGrid (the flow model, which takes rate bounds),
// measured from what arrived while every flow was backlogged:
//  - one-to-many (sim.send_pool_slots): under a sender-side bottleneck the bytes a sender's
//    destinations receive follow the pool's DRR weights, whether the pool's order alone decides (one
//    slot) or every connection has a message on the wire (its pacing);
//  - many-to-one: four senders into one receiver whose link is ten times slower than theirs; the
//    receiver's shaping (fpt::ReceiveShaper) holds the lighter senders to their shares.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <simgrid/s4u.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/runtime.hpp"
#include "scenario/scenario.hpp"
#include "sim/cluster.hpp"
#include "sim/platform.hpp"

namespace pstwin::sim {
namespace {

constexpr std::uint64_t kPayloadBytes = 64 * 1024;
constexpr int kMessagesPerFlow = 200;
constexpr NodeId kHub = 1;  // the sender of one-to-many, the receiver of many-to-one; the others are 2..5

enum class Direction { kOneToMany, kManyToOne };

struct Arrival {
  NodeId peer = kNoNode;  // the spoke: the receiver (one-to-many) or the sender (many-to-one)
  Seconds at = 0;
  std::uint64_t bytes = 0;
};

// Sends kMessagesPerFlow bulk messages to each of `receivers`, after setting its send weights.
class Sender final : public Node {
 public:
  Sender(SimNode& rt, NodeId id, std::map<NodeId, std::string> receivers, std::vector<PeerWeight> weights)
      : rt_(rt), id_(id), receivers_(std::move(receivers)), weights_(std::move(weights)) {}
  void start() override {
    rt_.set_self(id_);
    for (const auto& [id, address] : receivers_) rt_.connect(id, address);
    rt_.set_send_weights(1, weights_);
    std::uint64_t key = 0;
    for (int i = 0; i < kMessagesPerFlow; ++i)
      for (const auto& [id, address] : receivers_) {
        Message m;
        m.header.command = Command::kPush;
        m.header.recipient = id;
        m.header.key = key++;
        m.payload = Payload::phantom(kPayloadBytes);
        rt_.send(std::move(m));
      }
    rt_.stop();  // the pool and the streams go on without the sender's event loop
  }
  void on_message(Message) override {}
  std::string describe_state() const override { return "sending"; }

 private:
  SimNode& rt_;
  NodeId id_;
  std::map<NodeId, std::string> receivers_;
  std::vector<PeerWeight> weights_;
};

// Records every arrival (by receiver in one-to-many, by sender in many-to-one) until `expected` came.
class Receiver final : public Node {
 public:
  Receiver(SimNode& rt, NodeId id, Direction direction, std::vector<PeerWeight> weights, int expected,
           std::vector<Arrival>& arrivals)
      : rt_(rt),
        id_(id),
        direction_(direction),
        weights_(std::move(weights)),
        expected_(expected),
        arrivals_(arrivals) {}
  void start() override {
    rt_.set_self(id_);
    rt_.set_receive_weights(1, weights_);
  }
  void on_message(Message message) override {
    const NodeId peer = direction_ == Direction::kOneToMany ? id_ : message.header.sender;
    arrivals_.push_back({peer, rt_.now(), kHeaderBytes + message.payload.size()});
    if (++received_ == expected_) rt_.stop();
  }
  std::string describe_state() const override { return std::to_string(received_) + " received"; }

 private:
  SimNode& rt_;
  NodeId id_;
  Direction direction_;
  std::vector<PeerWeight> weights_;
  int expected_;
  std::vector<Arrival>& arrivals_;
  int received_ = 0;
};

// Runs a star in SimGrid: the hub (h5, 1 Gb/s) and four spokes 2..5 (h1..h4, 10 Gb/s), each node with
// `slots` pool slots (bulk messages on the wire at once, one per connection). One-to-many: the hub sends
// to every spoke with `weights` as its send weights. Many-to-one: every spoke sends to the hub, which
// takes `weights` as its receive weights. Returns, per spoke, the bytes that arrived until the first
// flow's last message did (every flow backlogged throughout that window). SimGrid's engine is one per
// process: the run happens in a forked child that reports through a pipe.
std::map<NodeId, double> received_while_all_backlogged(Direction direction, int slots,
                                                       const std::vector<PeerWeight>& weights) {
  int out[2];
  EXPECT_EQ(pipe(out), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(out[0]);
    const auto sc = parse_scenario(
        "name = \"pool_shares\"\n[cluster]\nhost_bandwidth = \"10Gbps\"\n[cluster.links.h5]\n"
        "bandwidth = \"1Gbps\"\n[roles]\nservers = 4\nworkers = 1\n[sim]\nnetwork_model = \"flow\"\n"
        "send_pool_slots = " +
            std::to_string(slots) + "\n",
        "pool_shares", {});
    int argc = 2;
    std::string arg0 = "pool_shares", arg1 = "--log=root.thres:critical";
    char* argv[] = {arg0.data(), arg1.data(), nullptr};
    simgrid::s4u::Engine engine(&argc, argv);
    configure_network_model(sc);
    // No ACK cross traffic: nothing comes back, so the bottleneck link carries the data alone.
    simgrid::s4u::Engine::set_config("network/crosstraffic:0");
    Platform platform = build_platform(sc);
    Cluster cluster(sc, platform);
    std::vector<Arrival> arrivals;
    const auto hub_host = sc.worker_host_name(0);
    const std::string hub_address = "hub@" + hub_host;
    const bool fan_out = direction == Direction::kOneToMany;
    std::map<NodeId, std::string> spokes;
    std::vector<SimNode*> nodes;
    // Receivers first: they take their weights before any flow starts.
    auto& hub = cluster.add_node("hub", hub_address, hub_host);
    if (!fan_out)
      hub.attach(std::make_unique<Receiver>(hub, kHub, direction, weights, 4 * kMessagesPerFlow, arrivals));
    for (int r = 0; r < 4; ++r) {
      const auto host = sc.server_host_name(r);
      const NodeId id = 2 + r;
      const std::string address = "spoke" + std::to_string(r) + "@" + host;
      auto& node = cluster.add_node("spoke " + std::to_string(r), address, host);
      if (fan_out)
        node.attach(std::make_unique<Receiver>(node, id, direction, std::vector<PeerWeight>{},
                                               kMessagesPerFlow, arrivals));
      else
        node.attach(std::make_unique<Sender>(node, id, std::map<NodeId, std::string>{{kHub, hub_address}},
                                             std::vector<PeerWeight>{}));
      spokes[id] = address;
      nodes.push_back(&node);
    }
    if (fan_out) hub.attach(std::make_unique<Sender>(hub, kHub, spokes, weights));
    if (fan_out)
      nodes.push_back(&hub);
    else
      nodes.insert(nodes.begin(), &hub);
    for (auto* node : nodes) node->spawn(0);
    engine.run();
    std::map<NodeId, int> count;
    Seconds window = 0;
    for (const auto& a : arrivals)
      if (++count[a.peer] == kMessagesPerFlow && window == 0) window = a.at;
    std::map<NodeId, double> bytes;
    for (const auto& a : arrivals)
      if (a.at <= window) bytes[a.peer] += static_cast<double>(a.bytes);
    std::ostringstream text;
    text << (cluster.failed() ? cluster.failure() : "ok") << "\n";
    for (const auto& [id, b] : bytes) text << id << " " << b << "\n";
    const auto s = text.str();
    const auto written = write(out[1], s.data(), s.size());
    _exit(written == static_cast<ssize_t>(s.size()) ? 0 : 1);
  }
  close(out[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) > 0;)
    text.append(buffer, static_cast<std::size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
  std::istringstream in(text);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "ok");
  std::map<NodeId, double> bytes;
  NodeId id = 0;
  double b = 0;
  while (in >> id >> b) bytes[id] = b;
  return bytes;
}

std::map<NodeId, double> shares(const std::map<NodeId, double>& bytes) {
  double total = 0;
  for (const auto& [id, b] : bytes) total += b;
  std::map<NodeId, double> out;
  for (const auto& [id, b] : bytes) out[id] = b / total;
  return out;
}

// 4:2:1:1 as a load balancer's table would scale it (heaviest 1000): each destination's share of the
// bytes received within 5 % of weight / 2000.
void expect_shares_follow_4_2_1_1(Direction direction, int slots) {
  const std::vector<PeerWeight> weights = {{2, 1000}, {3, 500}, {4, 250}, {5, 250}};
  const auto got = shares(received_while_all_backlogged(direction, slots, weights));
  ASSERT_EQ(got.size(), 4U);
  for (const auto& w : weights) {
    const double expected = w.weight / 2000.0;
    EXPECT_NEAR(got.at(w.peer), expected, 0.05 * expected) << "peer " << w.peer << ", " << slots << " slots";
  }
}

TEST(LbSimPool, SharesFollowTheDrrWeightsUnderASenderBottleneck) {
  // One slot: the pool's DRR order alone decides what the NIC carries.
  expect_shares_follow_4_2_1_1(Direction::kOneToMany, 1);
}

TEST(LbSimPool, PacingKeepsTheSharesWithEveryConnectionOnTheWire) {
  // One slot per connection: four flows share the NIC, which alone would split it equally. The pool
  // paces the lighter three at their shares of the link (SendPool::pacing_rate), the heaviest takes
  // the rest.
  expect_shares_follow_4_2_1_1(Direction::kOneToMany, 4);
}

TEST(LbSimPool, EqualWeightsGiveEqualShares) {
  // The same runs with the weights left at 1: the shares above come from the weights, not the setup.
  for (const int slots : {1, 4}) {
    const auto got = shares(received_while_all_backlogged(Direction::kOneToMany, slots, {}));
    ASSERT_EQ(got.size(), 4U);
    for (const auto& [id, share] : got)
      EXPECT_NEAR(share, 0.25, 0.05 * 0.25) << "destination " << id << ", " << slots << " slots";
  }
}

TEST(LbSimReceiveShaping, SharesFollowTheReceiversWeightsUnderAReceiverBottleneck) {
  // Four senders, each alone on its 10 Gb/s uplink, into one 1 Gb/s downlink: each sender's pool sees
  // one destination and cannot shape. The receiver holds the lighter three to their shares of its link.
  expect_shares_follow_4_2_1_1(Direction::kManyToOne, 1);
}

TEST(LbSimReceiveShaping, WithoutWeightsTheDownlinkSplitsEqually) {
  // The same run with no receive weights: the link's own sharing, so the shares above are the shaper's.
  const auto got = shares(received_while_all_backlogged(Direction::kManyToOne, 1, {}));
  ASSERT_EQ(got.size(), 4U);
  for (const auto& [id, share] : got) EXPECT_NEAR(share, 0.25, 0.05 * 0.25) << "sender " << id;
}

}  // namespace
}  // namespace pstwin::sim
