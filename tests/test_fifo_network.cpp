// sim.network_model = "fifo": the packet queues on their own (pipelining across links, a host's
// messages whole or in turns, a port's arrival order, pacing, tbf's bucket), and the whole simulator
// with them as the twin of a namespace cluster.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "sim/fifo_network.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using sim::FifoLinks;
using sim::MessageNetwork;
using testing::fresh_dir;
using testing::read_json;
using testing::run_pstwin;

constexpr double kPacket = FifoLinks::kPacketBytes;  // at kPacket B/s a packet takes one second
constexpr double kNoBound = MessageNetwork::kUnbounded;

void drain(FifoLinks& links) {
  while (links.next_event() < kNoBound) links.run_until(links.next_event());
}

TEST(FifoNetwork, AMessageIsPipelinedPacketByPacketAcrossTwoLinks) {
  FifoLinks links;
  const int nic = links.add_link(kPacket), port = links.add_link(kPacket);
  double sent = -1, done = -1;
  links.send(
      0, {{nic, 0.5}, {port, 0.5}}, 3 * kPacket, kNoBound, [&] { sent = links.now(); },
      [&] { done = links.now(); });
  drain(links);
  // The last packet leaves the NIC at 3 s, waits 0.5 s, crosses the port in 1 s and waits 0.5 s:
  // store and forward per packet, not per message (that would be 3 + 0.5 + 3 + 0.5).
  EXPECT_DOUBLE_EQ(sent, 3.0);
  EXPECT_DOUBLE_EQ(done, 5.0);
  EXPECT_DOUBLE_EQ(links.busy_seconds(nic), 3.0);
  EXPECT_DOUBLE_EQ(links.busy_seconds(port), 3.0);
  EXPECT_EQ(links.messages(), 0U);
}

TEST(FifoNetwork, AHostsMessagesTakeTurnsOnItsNicAPacketEach) {
  FifoLinks links;
  const int nic = links.add_link(kPacket), a = links.add_link(100 * kPacket),
            b = links.add_link(100 * kPacket);
  double first_sent = -1, second_sent = -1;
  links.send(0, {{nic, 0}, {a, 0}}, 4 * kPacket, kNoBound, [&] { first_sent = links.now(); }, {});
  links.send(0, {{nic, 0}, {b, 0}}, 4 * kPacket, kNoBound, [&] { second_sent = links.now(); }, {});
  drain(links);
  // The first message's first packet is on the wire when the second arrives and it stays ahead in
  // the turn order: 1 1 2 1 2 1 2 2. One message after the other would send the first by 4 s.
  EXPECT_DOUBLE_EQ(first_sent, 6.0);
  EXPECT_DOUBLE_EQ(second_sent, 8.0);
}

TEST(FifoNetwork, AReceiversPortServesPacketsInArrivalOrder) {
  FifoLinks links;
  const int nic1 = links.add_link(2 * kPacket), nic2 = links.add_link(2 * kPacket);
  const int port = links.add_link(kPacket);
  double first_done = -1, second_done = -1;
  links.send(0, {{nic1, 0}, {port, 0}}, 2 * kPacket, kNoBound, {}, [&] { first_done = links.now(); });
  links.send(0, {{nic2, 0}, {port, 0}}, 2 * kPacket, kNoBound, {}, [&] { second_done = links.now(); });
  drain(links);
  // Both first packets reach the port at 0.5 s (the first sender's by sequence first), both second
  // ones at 1 s: the port sends 1/1 (0.5-1.5), 2/1, 1/2 (2.5-3.5), 2/2 (3.5-4.5). The port never
  // idles and neither message overtakes the other's earlier packets.
  EXPECT_DOUBLE_EQ(first_done, 3.5);
  EXPECT_DOUBLE_EQ(second_done, 4.5);
}

TEST(FifoNetwork, APacedMessageKeepsToItsRateAndOthersUseTheGaps) {
  FifoLinks links;
  const int nic = links.add_link(4 * kPacket);
  double paced_done = -1, free_done = -1;
  links.send(0, {{nic, 0}}, 4 * kPacket, kPacket, {}, [&] { paced_done = links.now(); });
  links.send(0, {{nic, 0}}, 8 * kPacket, kNoBound, {}, [&] { free_done = links.now(); });
  drain(links);
  // The paced message's packets may leave at 0, 1, 2 and 3 s (0.25 s each on this NIC).
  EXPECT_DOUBLE_EQ(paced_done, 3.25);
  // The other one fills the NIC in between: its 8 packets and the paced one's first three by 2.75 s.
  EXPECT_DOUBLE_EQ(free_done, 2.75);
}

FifoLinks::Options messages_host(double pacing_burst_bytes = 0) {
  return {.host_queue = FifoLinks::HostQueue::kMessages, .pacing_burst_bytes = pacing_burst_bytes};
}

TEST(FifoNetwork, AHostsMessagesEnterItsQueueWholeInReleaseOrder) {
  FifoLinks links(messages_host());
  const int nic = links.add_link(kPacket), a = links.add_link(100 * kPacket),
            b = links.add_link(100 * kPacket);
  double first_sent = -1, second_sent = -1, first_done = -1, second_done = -1;
  links.send(
      0, {{nic, 0}, {a, 0}}, 4 * kPacket, kNoBound, [&] { first_sent = links.now(); },
      [&] { first_done = links.now(); }, 1);
  links.send(
      0, {{nic, 0}, {b, 0}}, 4 * kPacket, kNoBound, [&] { second_sent = links.now(); },
      [&] { second_done = links.now(); }, 2);
  drain(links);
  // The kernel took both at once (`sent`), and the NIC sends the first whole, then the second: the
  // first is in by 4 s (+ 0.01 s on the fast port), where turns took it to 6 s.
  EXPECT_DOUBLE_EQ(first_sent, 0.0);
  EXPECT_DOUBLE_EQ(second_sent, 0.0);
  EXPECT_DOUBLE_EQ(first_done, 4.01);
  EXPECT_DOUBLE_EQ(second_done, 8.01);
}

TEST(FifoNetwork, APacedConnectionSendsAMessageThenWaitsItsSizeAtItsRate) {
  // The epoll van's own pacing (no bucket): a message leaves at once, the next one its size at the
  // connection's rate later, while an unpaced connection's message goes straight into the queue.
  FifoLinks links(messages_host());
  const int nic = links.add_link(10 * kPacket);
  std::vector<double> sent;
  for (int i = 0; i < 3; ++i)
    links.send(
        0, {{nic, 0}}, kPacket, kPacket / 2, [&] { sent.push_back(links.now()); }, {}, 1);
  double free_sent = -1;
  links.send(
      0, {{nic, 0}}, kPacket, kNoBound, [&] { free_sent = links.now(); }, {}, 2);
  drain(links);
  EXPECT_EQ(sent, (std::vector<double>{0.0, 2.0, 4.0}));
  EXPECT_DOUBLE_EQ(free_sent, 0.0);

  // SO_MAX_PACING_RATE (a 2-packet bucket, full after idling): three messages at once (the third
  // puts it in debt), the fourth when the debt is repaid.
  FifoLinks kernel(messages_host(2 * kPacket));
  const int nic2 = kernel.add_link(10 * kPacket);
  std::vector<double> kernel_sent;
  for (int i = 0; i < 4; ++i)
    kernel.send(
        0, {{nic2, 0}}, kPacket, kPacket / 2, [&] { kernel_sent.push_back(kernel.now()); }, {}, 1);
  drain(kernel);
  EXPECT_EQ(kernel_sent, (std::vector<double>{0.0, 0.0, 0.0, 2.0}));
}

TEST(FifoNetwork, ALinksBucketLetsABurstThroughAtOnce) {
  // tbf: a 2-packet bucket, full at the start. Of a 4-packet message two leave at once and the rest
  // at the link's rate; after 10 s of idling a packet leaves at once again.
  FifoLinks links;
  const int link = links.add_link(kPacket, 2 * kPacket);
  double done = -1, later = -1;
  links.send(0, {{link, 0}}, 4 * kPacket, kNoBound, {}, [&] { done = links.now(); });
  drain(links);
  EXPECT_DOUBLE_EQ(done, 2.0);  // without the bucket: 4 s
  EXPECT_DOUBLE_EQ(links.busy_seconds(link), 4.0) << "busy time counts the bytes at the link's rate";
  links.send(12, {{link, 0}}, kPacket, kNoBound, {}, [&] { later = links.now(); });
  drain(links);
  EXPECT_DOUBLE_EQ(later, 12.0);
  EXPECT_THROW(links.add_link(kPacket, -1), std::invalid_argument);
}

TEST(FifoNetwork, CallbacksMaySendMore) {
  FifoLinks links;
  const int there = links.add_link(kPacket), back = links.add_link(kPacket);
  double reply_done = -1;
  links.send(0, {{there, 0.25}}, kPacket, kNoBound, {}, [&] {
    links.send(links.now(), {{back, 0.25}}, 2 * kPacket, kNoBound, {}, [&] { reply_done = links.now(); });
  });
  drain(links);
  EXPECT_DOUBLE_EQ(reply_done, 1.25 + 2.25);
}

TEST(FifoNetwork, BadArgumentsAreRefused) {
  FifoLinks links;
  EXPECT_THROW(links.add_link(0), std::invalid_argument);
  const int link = links.add_link(kPacket);
  EXPECT_THROW(links.send(0, {}, kPacket, kNoBound, {}, {}), std::invalid_argument);
  EXPECT_THROW(links.send(0, {{link, 0}}, 0, kNoBound, {}, {}), std::invalid_argument);
}

nlohmann::json sim(const std::string& name, const std::string& sets) {
  const auto dir = fresh_dir(name);
  const auto run = run_pstwin("sim scenarios/lb_hetero_agg_netns.toml -q --out " + dir.string() + " " + sets);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return read_json(dir / "results.json");
}

TEST(FifoNetwork, NamespaceTwinFollowsTheClustersPacing) {
  // lb_hetero_agg_netns (4 KB, credit 1) on the namespace cluster: 0.515-0.525 s against the 0.481 s
  // bound with the epoll van's own pacing, 0.619 s with PSTWIN_PACING=kernel (docs/FPT.md, "Pacing:
  // the van's or the kernel's"). The flow model has no queues and cannot tell the two apart.
  const auto epoll = sim("fifo-twin-epoll", "");
  const auto kernel = sim("fifo-twin-kernel", "--set sim.fifo_host=kernel-pacing");
  const auto flow = sim("fifo-twin-flow", "--set sim.network_model=flow");
  for (const auto* r : {&epoll, &kernel}) {
    EXPECT_EQ((*r)["invariants"]["violation_count"], 0);
    EXPECT_EQ((*r)["model_digest"], flow["model_digest"]) << "queues must change timing, never aggregates";
    EXPECT_NEAR((*r)["bound"]["time_s"].get<double>(), 0.481, 0.002)
        << "no cross-traffic charge: the real run's bound";
  }
  const double bound = epoll["bound"]["time_s"];
  const double with_van = epoll["bound"]["achieved_s"], with_kernel = kernel["bound"]["achieved_s"];
  EXPECT_GE(with_van, bound);
  EXPECT_LE(with_van, 1.15 * bound) << "the cluster: +7 to +11 %";
  EXPECT_GE(with_kernel, 0.56) << "the cluster: 0.619 s";
  EXPECT_LE(with_kernel, 0.68);
}

TEST(FifoNetwork, SameSeedSameResults) {
  const auto a = sim("fifo-same-a", "--set sim.network_model=fifo --set perturbation.delivery_jitter=200us");
  const auto b = sim("fifo-same-b", "--set sim.network_model=fifo --set perturbation.delivery_jitter=200us");
  EXPECT_EQ(a["iterations"], b["iterations"]);
  EXPECT_EQ(a["balancing"], b["balancing"]);
}

}  // namespace
}  // namespace pstwin
