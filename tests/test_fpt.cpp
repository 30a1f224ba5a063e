// FPT's send pool and receive shaper: pure logic, no sockets. DRR shares follow the weights, equal
// priorities keep their order, weight changes wait for the next round, control bypasses, and the same
// operations give the same sequence.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "fpt/message_pacer.hpp"
#include "fpt/receive_shaper.hpp"
#include "fpt/send_pool.hpp"

namespace pstwin::fpt {
namespace {

// A data message of `payload` phantom bytes (the pool only looks at sizes), tagged by key.
Message data(std::int32_t priority, std::uint64_t payload, std::uint64_t key) {
  Message m;
  m.header.command = Command::kPush;
  m.header.priority = priority;
  m.header.key = key;
  m.payload = Payload::phantom(payload);
  return m;
}

Message control(std::uint64_t key) {
  Message m;
  m.header.command = Command::kPull;
  m.header.key = key;
  return m;
}

void enqueue_ok(SendPool& pool, NodeId dest, Message m) {
  const auto error = pool.enqueue(dest, std::move(m));
  ASSERT_FALSE(error.has_value()) << *error;
}

TEST(FptSendPool, DrrSharesFollowWeightsUnderASenderBottleneck) {
  SendPool pool(SendPoolOptions{.quantum_bytes = 16 * 1024});
  const std::vector<PeerWeight> weights = {{2, 1}, {3, 2}, {4, 4}};
  ASSERT_FALSE(pool.set_weights(1, weights).has_value());
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::uint64_t> size(0, 300 * 1024);  // many messages larger than a quantum
  std::uint64_t key = 0;
  for (const auto& w : weights) {
    for (int i = 0; i < 8; ++i) enqueue_ok(pool, w.peer, data(0, size(rng), key++));
  }
  std::map<NodeId, std::uint64_t> sent;
  std::uint64_t total = 0;
  while (total < (std::uint64_t{2} << 30)) {  // 2 GiB of phantom bytes
    auto out = pool.next();
    ASSERT_TRUE(out.has_value());
    const std::uint64_t bytes = wire_bytes(out->message);
    sent[out->destination] += bytes;
    total += bytes;
    enqueue_ok(pool, out->destination, data(0, size(rng), key++));  // always backlogged
  }
  for (const auto& w : weights) {
    const double share = static_cast<double>(sent[w.peer]) / static_cast<double>(total);
    const double expected = w.weight / 7.0;
    EXPECT_NEAR(share, expected, 0.05 * expected) << "destination " << w.peer;
    EXPECT_EQ(pool.stats(w.peer).sent_bytes, sent[w.peer]);
    EXPECT_EQ(pool.stats(w.peer).weight, w.weight);
  }
}

TEST(FptSendPool, EqualPrioritiesKeepEnqueueOrderAndHigherPrioritiesGoFirst) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    SendPool pool(SendPoolOptions{.quantum_bytes = 4096});
    std::map<std::pair<NodeId, std::int32_t>, std::vector<std::uint64_t>> expected;  // (dest, prio) -> keys
    std::uint64_t key = 0;
    std::vector<std::pair<NodeId, std::uint64_t>> popped;  // interleave pops with enqueues
    std::map<std::pair<NodeId, std::int32_t>, std::vector<std::uint64_t>> got;
    for (int op = 0; op < 400; ++op) {
      if (rng() % 3 == 0) {
        if (auto out = pool.next())
          got[{out->destination, out->message.header.priority}].push_back(out->message.header.key);
        continue;
      }
      const auto dest = static_cast<NodeId>(2 + rng() % 3);
      const auto prio = static_cast<std::int32_t>(rng() % 3);
      expected[{dest, prio}].push_back(key);
      enqueue_ok(pool, dest, data(prio, rng() % 10000, key++));
    }
    while (auto out = pool.next())
      got[{out->destination, out->message.header.priority}].push_back(out->message.header.key);
    EXPECT_EQ(got, expected) << "trial " << trial;
    EXPECT_TRUE(pool.empty());
  }

  // Within one destination, everything queued at once comes out by priority, then enqueue order.
  SendPool pool;
  std::vector<std::pair<std::int32_t, std::uint64_t>> queued;
  for (std::uint64_t k = 0; k < 200; ++k) {
    const auto prio = static_cast<std::int32_t>(rng() % 5) - 2;
    queued.emplace_back(-prio, k);
    enqueue_ok(pool, 5, data(prio, 100, k));
  }
  std::sort(queued.begin(), queued.end());
  for (const auto& [negprio, k] : queued) {
    auto out = pool.next();
    ASSERT_TRUE(out.has_value());
    EXPECT_EQ(out->message.header.priority, -negprio);
    EXPECT_EQ(out->message.header.key, k);
  }
  EXPECT_FALSE(pool.next().has_value());
}

TEST(FptSendPool, WeightChangeAppliesFromTheNextRoundOnly) {
  // Quantum 1000 and messages costing exactly 1000 wire bytes: one message per weight unit per round.
  SendPool pool(SendPoolOptions{.quantum_bytes = 1000});
  for (std::uint64_t k = 0; k < 20; ++k) {
    enqueue_ok(pool, 2, data(0, 1000 - 64, k));
    enqueue_ok(pool, 3, data(0, 1000 - 64, 100 + k));
  }
  std::vector<NodeId> order;
  order.push_back(pool.next()->destination);  // round 1 starts: 2
  const std::vector<PeerWeight> w = {{2, 3}};
  ASSERT_FALSE(pool.set_weights(5, w).has_value());
  EXPECT_EQ(pool.weights_version(), 0u);  // not yet: round 1 is running
  EXPECT_EQ(pool.stats(2).weight, 1u);
  for (int i = 0; i < 9; ++i) order.push_back(pool.next()->destination);
  EXPECT_EQ(pool.weights_version(), 5u);
  // Round 1 with old weights (2, 3), then rounds of 2 x3 and 3 x1.
  EXPECT_EQ(order, (std::vector<NodeId>{2, 3, 2, 2, 2, 3, 2, 2, 2, 3}));
  EXPECT_EQ(pool.stats(2).weight, 3u);

  // A stale or malformed decision is refused and changes nothing.
  const auto stale = pool.set_weights(5, w);
  ASSERT_TRUE(stale.has_value());
  EXPECT_NE(stale->find("version 5"), std::string::npos) << *stale;
  const std::vector<PeerWeight> zero = {{2, 0}};
  const auto zero_error = pool.set_weights(6, zero);
  ASSERT_TRUE(zero_error.has_value());
  EXPECT_NE(zero_error->find("weight 0"), std::string::npos) << *zero_error;
  const std::vector<PeerWeight> twice = {{2, 1}, {2, 2}};
  EXPECT_NE(pool.set_weights(6, twice).value_or("").find("listed twice"), std::string::npos);
  EXPECT_EQ(pool.weights_version(), 5u);
}

TEST(FptSendPool, MessageLargerThanAQuantumIsSentAsDeficitCarriesOver) {
  SendPool pool(SendPoolOptions{.quantum_bytes = 1024});
  enqueue_ok(pool, 2, data(0, 1 << 20, 1));  // 1 MiB: 1025 quanta
  for (std::uint64_t k = 0; k < 3000; ++k) enqueue_ok(pool, 3, data(0, 1024 - 64, 100 + k));
  std::uint64_t before = 0;
  for (;;) {
    auto out = pool.next();
    ASSERT_TRUE(out.has_value());
    if (out->destination == 2) break;
    ++before;
  }
  // Equal weights: the other destination sends one quantum per round while the big one saves up.
  EXPECT_GE(before, 1024u);
  EXPECT_LE(before, 1026u);

  // Alone, a huge message goes out at once (the empty rounds are skipped, not looped).
  SendPool alone(SendPoolOptions{.quantum_bytes = 1});
  enqueue_ok(alone, 4, data(0, std::uint64_t{1} << 40, 9));
  auto out = alone.next();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->message.header.key, 9u);
}

TEST(FptSendPool, ControlBypassesDataButWaitsForABlockedDestination) {
  SendPool pool;
  enqueue_ok(pool, 2, data(9, 100, 1));
  enqueue_ok(pool, 3, control(2));
  enqueue_ok(pool, 2, control(3));
  pool.set_blocked(2, true);
  auto first = pool.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->message.header.key, 2u);
  EXPECT_FALSE(pool.next().has_value());  // destination 2 is blocked: its control and data wait
  EXPECT_EQ(pool.stats(2).queued_messages, 2u);
  pool.set_blocked(2, false);
  EXPECT_EQ(pool.next()->message.header.key, 3u);
  EXPECT_EQ(pool.next()->message.header.key, 1u);
  EXPECT_TRUE(pool.empty());
}

TEST(FptSendPool, APacedDestinationsDataWaitsButItsControlGoes) {
  SendPool pool;
  enqueue_ok(pool, 2, data(9, 100, 1));
  enqueue_ok(pool, 3, data(9, 100, 4));
  pool.set_paced(2, true);
  enqueue_ok(pool, 2, control(2));
  EXPECT_EQ(pool.next()->message.header.key, 2u) << "control to a paced destination goes";
  EXPECT_EQ(pool.next()->message.header.key, 4u) << "the others' data goes";
  EXPECT_FALSE(pool.next().has_value()) << "destination 2's data waits for the pacing";
  // Blocked as well (its socket is full): released from pacing, it still waits for the socket.
  enqueue_ok(pool, 2, control(3));
  pool.set_blocked(2, true);
  pool.set_paced(2, false);
  EXPECT_FALSE(pool.next().has_value());
  pool.set_blocked(2, false);
  EXPECT_EQ(pool.next()->message.header.key, 3u);
  EXPECT_EQ(pool.next()->message.header.key, 1u);
  EXPECT_TRUE(pool.empty());
}

TEST(FptSendPool, EmptyUnknownAndDroppedDestinations) {
  SendPool pool;
  EXPECT_FALSE(pool.next().has_value());
  const auto error = pool.enqueue(kNoNode, data(0, 1, 1));
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("kNoNode"), std::string::npos) << *error;
  EXPECT_TRUE(pool.empty());
  EXPECT_EQ(pool.stats(42).queued_bytes, 0u);
  EXPECT_EQ(pool.stats(42).sent_messages, 0u);
  EXPECT_TRUE(pool.drop(42).empty());
  EXPECT_TRUE(SendPool::validate(SendPoolOptions{.quantum_bytes = 0}).has_value());

  enqueue_ok(pool, 2, data(0, 10, 1));
  enqueue_ok(pool, 2, control(2));
  enqueue_ok(pool, 3, data(0, 10, 3));
  EXPECT_EQ(pool.stats(2).queued_bytes, 64u + 10u + 64u);
  EXPECT_EQ(pool.drop(2).size(), 2u);
  EXPECT_EQ(pool.queued_messages(), 1u);
  EXPECT_EQ(pool.next()->message.header.key, 3u);
  EXPECT_FALSE(pool.next().has_value());
}

TEST(FptSendPool, PacingHoldsLighterDestinationsToTheirShareOfTheLink) {
  SendPool pool(SendPoolOptions{.quantum_bytes = 256, .link_rate_Bps = 1e9});
  EXPECT_EQ(pool.pacing_rate(2), 0);  // no table yet: nothing paced
  ASSERT_FALSE(pool.set_weights(1, std::vector<PeerWeight>{{2, 1000}, {3, 500}, {4, 250}, {5, 250}}));
  EXPECT_EQ(pool.pacing_rate(2), 0);  // the heaviest takes whatever the others leave
  EXPECT_DOUBLE_EQ(pool.pacing_rate(3), 0.25e9);
  EXPECT_DOUBLE_EQ(pool.pacing_rate(4), 0.125e9);
  EXPECT_DOUBLE_EQ(pool.pacing_rate(5), 0.125e9);
  EXPECT_EQ(pool.pacing_rate(9), 0);  // unlisted (the scheduler's reports): never held back
  // Without a link rate the pool does not pace; a negative or infinite rate is refused, named.
  SendPool unpaced;
  ASSERT_FALSE(unpaced.set_weights(1, std::vector<PeerWeight>{{2, 1000}, {3, 500}}));
  EXPECT_EQ(unpaced.pacing_rate(3), 0);
  const auto error = SendPool::validate(SendPoolOptions{.link_rate_Bps = -1});
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("link_rate_Bps"), std::string::npos) << *error;
  EXPECT_TRUE(SendPool::validate(SendPoolOptions{.link_rate_Bps = std::numeric_limits<double>::infinity()})
                  .has_value());
}

TEST(FptSendPool, SameOperationsGiveTheSameSequence) {
  auto run = [] {
    SendPool pool(SendPoolOptions{.quantum_bytes = 5000});
    std::mt19937_64 rng(3);
    std::vector<std::pair<NodeId, std::uint64_t>> out;
    for (std::uint64_t k = 0; k < 2000; ++k) {
      const auto dest = static_cast<NodeId>(2 + rng() % 6);
      enqueue_ok(pool, dest,
                 rng() % 7 == 0 ? control(k) : data(static_cast<std::int32_t>(rng() % 4), rng() % 20000, k));
      if (k % 500 == 0) {
        const std::vector<PeerWeight> w = {{dest, static_cast<std::uint32_t>(1 + k % 5)}};
        EXPECT_FALSE(pool.set_weights(k + 1, w).has_value());
      }
      if (rng() % 2 == 0) {
        if (auto o = pool.next()) out.emplace_back(o->destination, o->message.header.key);
      }
    }
    while (auto o = pool.next()) out.emplace_back(o->destination, o->message.header.key);
    return out;
  };
  const auto a = run();
  EXPECT_EQ(a.size(), 2000u);
  EXPECT_EQ(a, run());
}

TEST(FptReceiveShaper, HoldsLighterSendersToTheirShareOfTheLink) {
  ReceiveShaper shaper(2000.0);    // bytes/s of the receiver's link
  EXPECT_EQ(shaper.rate(3), 0.0);  // no table: nobody is shaped
  ASSERT_FALSE(shaper.set_weights(1, std::vector<PeerWeight>{{2, 1000}, {3, 500}, {4, 250}, {5, 250}}));
  EXPECT_EQ(shaper.rate(2), 0.0);  // the heaviest takes what the others leave
  EXPECT_DOUBLE_EQ(shaper.rate(3), 500.0);
  EXPECT_DOUBLE_EQ(shaper.rate(4), 250.0);
  EXPECT_DOUBLE_EQ(shaper.rate(5), 250.0);
  EXPECT_EQ(shaper.rate(9), 0.0);  // not in the table (the scheduler's reports): not shaped
  // Applied at once (no round to wait for), and an empty table ends shaping (the probe state).
  ASSERT_FALSE(shaper.set_weights(2, std::vector<PeerWeight>{{2, 1}, {3, 3}}));
  EXPECT_DOUBLE_EQ(shaper.rate(2), 500.0);
  EXPECT_EQ(shaper.rate(3), 0.0);
  ASSERT_FALSE(shaper.set_weights(3, {}));
  EXPECT_EQ(shaper.rate(2), 0.0);
  EXPECT_EQ(shaper.version(), 3U);
  // Refused, naming what is wrong, and the table in force stays.
  const auto stale = shaper.set_weights(3, std::vector<PeerWeight>{{2, 1}, {3, 3}});
  ASSERT_TRUE(stale.has_value());
  EXPECT_NE(stale->find("not newer than version 3"), std::string::npos) << *stale;
  const auto zero = shaper.set_weights(4, std::vector<PeerWeight>{{2, 0}});
  ASSERT_TRUE(zero.has_value());
  EXPECT_NE(zero->find("node 2 has weight 0"), std::string::npos) << *zero;
  EXPECT_EQ(shaper.version(), 3U);
  // Without a link rate (PSTWIN_NIC_RATE unset) nothing can be shaped.
  ReceiveShaper unknown_link;
  ASSERT_FALSE(unknown_link.set_weights(1, std::vector<PeerWeight>{{2, 1000}, {3, 1}}));
  EXPECT_EQ(unknown_link.rate(3), 0.0);
}

TEST(FptReceiveShaper, AHoldEveryPeerTableHoldsTheHeaviestToo) {
  // A load-balanced server's table: each worker brings it the same bytes, and each key waits for all
  // of them, so every one is held to its share, none left free to run ahead.
  ReceiveShaper shaper(3000.0);
  ASSERT_FALSE(shaper.set_weights(1, std::vector<PeerWeight>{{kHoldEveryPeer, 7}, {2, 1}, {3, 1}, {4, 1}}));
  EXPECT_DOUBLE_EQ(shaper.rate(2), 1000.0);  // the marker's weight counts in no sum
  EXPECT_DOUBLE_EQ(shaper.rate(3), 1000.0);
  EXPECT_DOUBLE_EQ(shaper.rate(4), 1000.0);
  EXPECT_EQ(shaper.rate(kHoldEveryPeer), 0.0);  // no node behind it
  EXPECT_EQ(shaper.rate(9), 0.0);               // unlisted: not shaped
  // Unequal weights: shares of the sum, the heaviest held as well.
  ASSERT_FALSE(shaper.set_weights(2, std::vector<PeerWeight>{{2, 2}, {kHoldEveryPeer, 1}, {3, 1}}));
  EXPECT_DOUBLE_EQ(shaper.rate(2), 2000.0);
  EXPECT_DOUBLE_EQ(shaper.rate(3), 1000.0);
  // The send pool paces by the same rule (a server's replies to its workers).
  SendPool pool(SendPoolOptions{.quantum_bytes = 256, .link_rate_Bps = 4e9});
  ASSERT_FALSE(pool.set_weights(1, std::vector<PeerWeight>{{kHoldEveryPeer, 1}, {2, 1}, {3, 1}}));
  EXPECT_DOUBLE_EQ(pool.pacing_rate(2), 2e9);
  EXPECT_DOUBLE_EQ(pool.pacing_rate(3), 2e9);
}

// The ZeroMQ van's pacing rule: a message, then a wait of its size at the peer's share.
TEST(FptMessagePacer, HoldsALightPeerForItsMessagesSizeAtItsShare) {
  MessagePacer pacer(4000.0);  // bytes/s of the sender's link
  EXPECT_TRUE(pacer.active());
  EXPECT_FALSE(pacer.set_weights(1, std::vector<PeerWeight>{{2, 3}, {3, 1}}).has_value());
  EXPECT_DOUBLE_EQ(pacer.rate(3), 1000.0);  // 1 of 4
  EXPECT_EQ(pacer.rate(2), 0.0);            // the heaviest runs free
  pacer.sent(3, 500, 10.0);
  pacer.sent(2, 500, 10.0);
  EXPECT_TRUE(pacer.held(3, 10.0));
  EXPECT_TRUE(pacer.held(3, 10.499));
  EXPECT_FALSE(pacer.held(3, 10.5));
  EXPECT_FALSE(pacer.held(2, 10.0));
  EXPECT_DOUBLE_EQ(*pacer.next_release(10.0), 10.5);
  EXPECT_FALSE(pacer.next_release(10.5).has_value());
  // Sent before the debt is paid (a control-free burst): the wait adds up.
  pacer.sent(3, 500, 10.25);
  EXPECT_DOUBLE_EQ(*pacer.next_release(10.25), 11.0);
  // Released late: the time it sat idle is not credited to the next message.
  pacer.sent(3, 1000, 20.0);
  EXPECT_DOUBLE_EQ(*pacer.next_release(20.0), 21.0);
  // A stale version is refused and changes nothing; an empty table (probe) lifts every hold.
  EXPECT_TRUE(pacer.set_weights(1, {}).has_value());
  EXPECT_TRUE(pacer.held(3, 20.5));
  EXPECT_FALSE(pacer.set_weights(2, {}).has_value());
  EXPECT_FALSE(pacer.held(3, 20.5));
  EXPECT_FALSE(pacer.next_release(20.5).has_value());
  // No link rate: never paced, whatever the table.
  MessagePacer unknown_link;
  EXPECT_FALSE(unknown_link.active());
  EXPECT_FALSE(unknown_link.set_weights(1, std::vector<PeerWeight>{{2, 3}, {3, 1}}).has_value());
  unknown_link.sent(3, 500, 0.0);
  EXPECT_FALSE(unknown_link.held(3, 0.0));
}

TEST(FptTokenBucket, RefillsAtItsRateUpToItsDepth) {
  TokenBucket bucket(128.0, 50.0, 10.0);  // 128 B/s, 50 B deep, at t = 10 s (binary fractions: exact)
  EXPECT_EQ(bucket.available(), 50U);     // starts full
  bucket.take(30);
  EXPECT_EQ(bucket.available(), 20U);
  bucket.refill(10.125);
  EXPECT_EQ(bucket.available(), 36U);
  EXPECT_DOUBLE_EQ(bucket.seconds_until(50), 14.0 / 128);
  EXPECT_DOUBLE_EQ(bucket.seconds_until(500), 14.0 / 128);  // never more than the depth
  EXPECT_EQ(bucket.seconds_until(36), 0.0);
  bucket.refill(5.0);  // a clock that went back adds nothing
  EXPECT_EQ(bucket.available(), 36U);
  bucket.refill(20.0);
  EXPECT_EQ(bucket.available(), 50U);  // capped at the depth
  bucket.take(80);
  EXPECT_EQ(bucket.available(), 0U);  // never below zero
}

}  // namespace
}  // namespace pstwin::fpt
