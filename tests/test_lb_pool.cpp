// FPT's send pool inside the simulator (sim.send_pool_slots): under a sender-side bottleneck the
// bytes a sender's destinations receive follow the pool's DRR weights, whether the pool's order alone
// decides (one slot) or every connection has a message on the wire (its pacing). Real SimGrid (the
// flow model, which takes the pacing rate), one sender whose NIC is ten times slower than its
// receivers', measured from what the receivers got.
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
constexpr int kMessagesPerDestination = 200;

struct Arrival {
  NodeId receiver = kNoNode;
  Seconds at = 0;
  std::uint64_t bytes = 0;
};

// Sends kMessagesPerDestination bulk messages to every receiver at once, after setting its weights.
class Sender final : public Node {
 public:
  Sender(SimNode& rt, std::map<NodeId, std::string> receivers, std::vector<SendWeight> weights)
      : rt_(rt), receivers_(std::move(receivers)), weights_(std::move(weights)) {}
  void start() override {
    rt_.set_self(1);
    for (const auto& [id, address] : receivers_) rt_.connect(id, address);
    rt_.set_send_weights(1, weights_);
    std::uint64_t key = 0;
    for (int i = 0; i < kMessagesPerDestination; ++i)
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
  std::map<NodeId, std::string> receivers_;
  std::vector<SendWeight> weights_;
};

class Receiver final : public Node {
 public:
  Receiver(SimNode& rt, NodeId id, std::vector<Arrival>& arrivals) : rt_(rt), id_(id), arrivals_(arrivals) {}
  void start() override { rt_.set_self(id_); }
  void on_message(Message message) override {
    arrivals_.push_back({id_, rt_.now(), kHeaderBytes + message.payload.size()});
    if (++received_ == kMessagesPerDestination) rt_.stop();
  }
  std::string describe_state() const override { return std::to_string(received_) + " received"; }

 private:
  SimNode& rt_;
  NodeId id_;
  std::vector<Arrival>& arrivals_;
  int received_ = 0;
};

// Runs the sender (h5, 1 Gb/s) and four receivers (h1..h4, 10 Gb/s) in SimGrid with `slots` pool
// slots (bulk messages on the wire at once, one per connection) and `weights` for receivers 2..5. Returns,
// per receiver, the bytes it got until the heaviest destination's last message arrived (every destination
// backlogged throughout that window). SimGrid's engine is one per process: the run happens in a forked child
// that reports through a pipe.
std::map<NodeId, double> received_while_all_backlogged(int slots, const std::vector<SendWeight>& weights) {
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
    // No ACK cross traffic: nothing comes back, so the sender's NIC carries its data alone.
    simgrid::s4u::Engine::set_config("network/crosstraffic:0");
    Platform platform = build_platform(sc);
    Cluster cluster(sc, platform);
    std::vector<Arrival> arrivals;
    std::map<NodeId, std::string> receivers;
    std::vector<SimNode*> nodes;
    for (int r = 0; r < 4; ++r) {
      const auto host = sc.server_host_name(r);
      const NodeId id = 2 + r;
      auto& node = cluster.add_node("receiver " + std::to_string(r),
                                    "receiver" + std::to_string(r) + "@" + host, host);
      node.attach(std::make_unique<Receiver>(node, id, arrivals));
      receivers[id] = "receiver" + std::to_string(r) + "@" + host;
      nodes.push_back(&node);
    }
    const auto host = sc.worker_host_name(0);
    auto& sender = cluster.add_node("sender", "sender@" + host, host);
    sender.attach(std::make_unique<Sender>(sender, receivers, weights));
    nodes.push_back(&sender);
    for (auto* node : nodes) node->spawn(0);
    engine.run();
    std::map<NodeId, int> count;
    Seconds window = 0;
    for (const auto& a : arrivals)
      if (++count[a.receiver] == kMessagesPerDestination && window == 0) window = a.at;
    std::map<NodeId, double> bytes;
    for (const auto& a : arrivals)
      if (a.at <= window) bytes[a.receiver] += static_cast<double>(a.bytes);
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
void expect_shares_follow_4_2_1_1(int slots) {
  const std::vector<SendWeight> weights = {{2, 1000}, {3, 500}, {4, 250}, {5, 250}};
  const auto got = shares(received_while_all_backlogged(slots, weights));
  ASSERT_EQ(got.size(), 4U);
  for (const auto& w : weights) {
    const double expected = w.weight / 2000.0;
    EXPECT_NEAR(got.at(w.destination), expected, 0.05 * expected)
        << "destination " << w.destination << ", " << slots << " slots";
  }
}

TEST(LbSimPool, SharesFollowTheDrrWeightsUnderASenderBottleneck) {
  // One slot: the pool's DRR order alone decides what the NIC carries.
  expect_shares_follow_4_2_1_1(1);
}

TEST(LbSimPool, PacingKeepsTheSharesWithEveryConnectionOnTheWire) {
  // One slot per connection: four flows share the NIC, which alone would split it equally. The pool
  // paces the lighter three at their shares of the link (SendPool::pacing_rate), the heaviest takes
  // the rest.
  expect_shares_follow_4_2_1_1(4);
}

TEST(LbSimPool, EqualWeightsGiveEqualShares) {
  // The same runs with the weights left at 1: the shares above come from the weights, not the setup.
  for (const int slots : {1, 4}) {
    const auto got = shares(received_while_all_backlogged(slots, {}));
    ASSERT_EQ(got.size(), 4U);
    for (const auto& [id, share] : got)
      EXPECT_NEAR(share, 0.25, 0.05 * 0.25) << "destination " << id << ", " << slots << " slots";
  }
}

}  // namespace
}  // namespace pstwin::sim
