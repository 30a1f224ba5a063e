// The ps-lite API's pieces that need no job: the frame that carries an app message (pslite/wire.hpp)
// and SArray's sharing. Whole applications run as jobs of processes (tests/CMakeLists.txt, PsLite.*).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "ps/ps.h"
#include "pslite/wire.hpp"

namespace {

using pstwin::Command;
using pstwin::pslite::from_wire;
using pstwin::pslite::to_wire;

ps::Message sample() {
  ps::Message message;
  message.meta.head = -7;
  message.meta.body = "body text";
  message.meta.app_id = 3;
  message.meta.customer_id = 65535;
  message.meta.timestamp = 123456;
  message.meta.recver = 9;
  message.meta.request = true;
  message.meta.push = true;
  message.meta.pull = true;
  message.meta.priority = -2;
  message.AddData(ps::SArray<ps::Key>(std::vector<ps::Key>{1, 2, ps::kMaxKey - 1}));
  message.AddData(ps::SArray<float>(std::vector<float>{0.5f, -1.5f, 3.25f}));
  message.AddData(ps::SArray<int>(std::vector<int>{1, 1, 1}));
  return message;
}

pstwin::Message received(pstwin::Message frame) {
  frame.header.sender = 8;
  return frame;
}

TEST(PsLiteWire, RoundTripsEveryField) {
  const ps::Message sent = sample();
  const pstwin::Message frame = to_wire(sent);
  EXPECT_EQ(frame.header.command, Command::kApp);
  EXPECT_EQ(frame.header.recipient, 9u);
  std::string error;
  const auto got = from_wire(received(frame), error);
  ASSERT_TRUE(got) << error;
  EXPECT_EQ(got->meta.head, -7);
  EXPECT_EQ(got->meta.body, "body text");
  EXPECT_EQ(got->meta.app_id, 3);
  EXPECT_EQ(got->meta.customer_id, 65535);
  EXPECT_EQ(got->meta.timestamp, 123456);
  EXPECT_EQ(got->meta.sender, 8);
  EXPECT_TRUE(got->meta.request);
  EXPECT_TRUE(got->meta.push);
  EXPECT_TRUE(got->meta.pull);
  EXPECT_FALSE(got->meta.simple_app);
  EXPECT_EQ(got->meta.priority, -2);
  ASSERT_EQ(got->data.size(), 3u);
  const ps::SArray<ps::Key> keys(got->data[0]);
  const ps::SArray<float> vals(got->data[1]);
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[2], ps::kMaxKey - 1);
  ASSERT_EQ(vals.size(), 3u);
  EXPECT_EQ(vals[1], -1.5f);
}

TEST(PsLiteWire, RefusesEveryTruncationAndTrailingBytes) {
  const pstwin::Message frame = to_wire(sample());
  const auto bytes = frame.payload.bytes();
  for (std::size_t keep = 0; keep < bytes.size(); ++keep) {
    pstwin::Message cut = frame;
    cut.payload = pstwin::Payload::copy_of(bytes.first(keep));
    std::string error;
    EXPECT_FALSE(from_wire(received(cut), error)) << keep << " bytes";
    EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  }
  std::vector<std::byte> longer(bytes.begin(), bytes.end());
  longer.push_back(std::byte{0});
  pstwin::Message padded = frame;
  padded.payload = pstwin::Payload::copy_of(longer);
  std::string error;
  EXPECT_FALSE(from_wire(received(padded), error));
  EXPECT_NE(error.find("1 trailing bytes"), std::string::npos) << error;
}

TEST(PsLiteWire, RefusesForgedFlagsSegmentCountsAndPhantoms) {
  const pstwin::Message frame = to_wire(sample());
  std::vector<std::byte> bytes(frame.payload.bytes().begin(), frame.payload.bytes().end());
  std::string error;
  auto forged = bytes;
  forged[0] = std::byte{0x80};
  pstwin::Message bad_flags = frame;
  bad_flags.payload = pstwin::Payload::copy_of(forged);
  EXPECT_FALSE(from_wire(received(bad_flags), error));
  EXPECT_NE(error.find("unknown flags 128"), std::string::npos) << error;

  // The segment count sits after flags, head, body length and body.
  forged = bytes;
  const std::size_t count_at = 1 + 4 + 4 + std::strlen("body text");
  const std::uint32_t huge = 0xFFFFFFFF;
  std::memcpy(forged.data() + count_at, &huge, sizeof huge);
  pstwin::Message bad_count = frame;
  bad_count.payload = pstwin::Payload::copy_of(forged);
  EXPECT_FALSE(from_wire(received(bad_count), error));
  EXPECT_NE(error.find("4294967295 segments"), std::string::npos) << error;

  pstwin::Message phantom = frame;
  phantom.payload = pstwin::Payload::phantom(64);
  EXPECT_FALSE(from_wire(received(phantom), error));
  EXPECT_NE(error.find("phantom"), std::string::npos) << error;
}

TEST(PsLiteWire, RefusesIdsOutsideSixteenBits) {
  ps::Message message = sample();
  message.meta.app_id = 70000;
  try {
    to_wire(message);
    FAIL() << "an app_id of 70000 was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("app_id 70000 is outside 0..65535"), std::string::npos)
        << error.what();
  }
}

TEST(SArray, CopiesShareSegmentsViewAndTypesReinterpret) {
  ps::SArray<int> ints(std::vector<int>{1, 2, 3, 4});
  ps::SArray<int> shared = ints;
  shared[0] = 10;
  EXPECT_EQ(ints[0], 10);
  const ps::SArray<int> middle = ints.segment(1, 3);
  ASSERT_EQ(middle.size(), 2u);
  ints[1] = 20;
  EXPECT_EQ(middle[0], 20);
  const ps::SArray<char> bytes(ints);
  EXPECT_EQ(bytes.size(), 4 * sizeof(int));
  const ps::SArray<int> back(bytes);
  EXPECT_EQ(back[3], 4);
  ps::SArray<int> copy;
  copy.CopyFrom(ints);
  copy[0] = 99;
  EXPECT_EQ(ints[0], 10);
  copy.resize(6, 7);
  EXPECT_EQ(copy[5], 7);
  EXPECT_EQ(copy[0], 99);
  const auto range =
      ps::FindRange(ps::SArray<ps::Key>(std::vector<ps::Key>{1, 5, 9, 12}), ps::Key{5}, ps::Key{12});
  EXPECT_EQ(range.begin(), 1u);
  EXPECT_EQ(range.end(), 3u);
}

}  // namespace
