// The two orderings both backends share: timers and a connection's send queue.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/send_order.hpp"
#include "core/timer_queue.hpp"

namespace pstwin {
namespace {

TEST(TimerQueue, SameDeadlineFiresInStartOrderAndCancelRemoves) {
  TimerQueue timers;
  std::string fired;
  timers.add(2.0, [&] { fired += "c"; });
  timers.add(1.0, [&] { fired += "a"; });
  const TimerId dropped = timers.add(1.0, [&] { fired += "x"; });
  timers.add(1.0, [&] { fired += "b"; });
  timers.cancel(dropped);
  timers.cancel(dropped);  // twice is harmless
  EXPECT_EQ(timers.next_deadline(), 1.0);
  EXPECT_FALSE(timers.pop_due(0.5).has_value());
  while (auto fire = timers.pop_due(1.0)) (*fire)();
  EXPECT_EQ(fired, "ab");
  EXPECT_FALSE(timers.empty());
  while (auto fire = timers.pop_due(5.0)) (*fire)();
  EXPECT_EQ(fired, "abc");
  EXPECT_TRUE(timers.empty());
}

TEST(SendOrder, ControlFirstThenPriorityThenSequence) {
  auto message = [](std::uint64_t sequence, std::int32_t priority, bool bulk) {
    Message m;
    m.header.sequence = sequence;
    m.header.priority = priority;
    if (bulk) m.payload = Payload::phantom(1024);
    return m;
  };
  std::map<SendOrderKey, std::string> queue;
  queue[send_order_key(message(1, 0, true))] = "bulk p0 s1";
  queue[send_order_key(message(2, -3, true))] = "bulk p-3 s2";
  queue[send_order_key(message(3, 0, true))] = "bulk p0 s3";
  queue[send_order_key(message(4, -3, false))] = "ack s4";
  queue[send_order_key(message(5, 0, false))] = "ack s5";
  std::string order;
  for (const auto& [key, name] : queue) order += name + ", ";
  EXPECT_EQ(order, "ack s5, ack s4, bulk p0 s1, bulk p0 s3, bulk p-3 s2, ");
}

}  // namespace
}  // namespace pstwin
