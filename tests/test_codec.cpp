#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/codec.hpp"
#include "core/random.hpp"

namespace pstwin {
namespace {

std::span<const std::byte> as_bytes(const std::string& s) {
  return std::as_bytes(std::span(s));
}

MessageHeader extreme_header() {
  MessageHeader h;
  h.sender = std::numeric_limits<NodeId>::min();
  h.recipient = std::numeric_limits<NodeId>::max();
  h.app_id = 0xFFFF;
  h.customer_id = 0xFFFE;
  h.command = Command::kFatal;  // the highest command
  h.is_response = true;
  h.priority = std::numeric_limits<std::int32_t>::min();
  h.sequence = std::numeric_limits<std::uint64_t>::max();
  h.iteration = 0xFFFFFFFFu;
  h.partition = 0xFFFFFFFEu;
  h.key = 0x8000000000000001ULL;
  return h;
}

Payload pattern_payload(std::size_t size, std::uint8_t seed = 3) {
  auto buffer = std::make_shared<ByteBuffer>(size);
  for (std::size_t i = 0; i < size; ++i) buffer->data()[i] = static_cast<std::byte>(i * 31 + seed);
  return Payload::adopt(buffer);
}

// Re-seals a hand-edited header so that only the field under test is wrong.
void reseal(std::string& frame) {
  const auto crc = payload_crc32(as_bytes(frame).first(60));
  for (int i = 0; i < 4; ++i)
    frame[60 + static_cast<std::size_t>(i)] = static_cast<char>((crc >> (8 * i)) & 0xFF);
}

std::string valid_frame(std::size_t payload_size = 40) {
  Message m;
  m.header = extreme_header();
  m.payload = pattern_payload(payload_size);
  return encode_frame(m);
}

std::optional<DecodeError> decode(const std::string& frame, Message& out, const DecodeLimits& limits = {}) {
  return decode_frame(as_bytes(frame), out, limits);
}

std::string field_of(const std::string& frame, const DecodeLimits& limits = {}) {
  Message out;
  auto err = decode(frame, out, limits);
  return err ? err->field : std::string("<accepted>");
}

TEST(Codec, RoundTripExtremeValues) {
  for (const MessageHeader& h : {extreme_header(), MessageHeader{}}) {
    Message m;
    m.header = h;
    m.payload = pattern_payload(1000);
    const std::string frame = encode_frame(m);
    ASSERT_EQ(frame.size(), kHeaderBytes + 1000);

    Message out;
    auto err = decode(frame, out);
    ASSERT_FALSE(err) << err->to_string();
    MessageHeader expected = h;
    expected.payload_length = 1000;
    expected.payload_crc = payload_crc32(m.payload.bytes());
    EXPECT_EQ(out.header, expected);
    EXPECT_FALSE(out.payload.is_phantom());
    ASSERT_EQ(out.payload.size(), 1000u);
    EXPECT_EQ(std::memcmp(out.payload.bytes().data(), m.payload.bytes().data(), 1000), 0);
    EXPECT_NE(out.payload.bytes().data(), m.payload.bytes().data());  // decoded into a fresh buffer
  }
}

TEST(Codec, EveryCommandAndResponseFlagRoundTrips) {
  for (std::uint16_t c = 1; c <= kMaxCommand; ++c) {
    for (bool response : {false, true}) {
      Message m;
      m.header.command = static_cast<Command>(c);
      m.header.is_response = response;
      m.header.sender = 9;
      m.header.recipient = 8;
      Message out;
      auto err = decode(encode_frame(m), out);
      ASSERT_FALSE(err) << err->to_string();
      EXPECT_EQ(out.header.command, m.header.command);
      EXPECT_EQ(out.header.is_response, response);
      EXPECT_TRUE(out.payload.empty());
      EXPECT_EQ(out.header.payload_crc, 0u);  // CRC-32 of nothing
      EXPECT_NE(command_name(static_cast<Command>(c)), "unknown");
    }
  }
}

TEST(Codec, WireLayoutIsLittleEndian) {
  MessageHeader h;
  h.command = Command::kPush;
  h.sender = 0x01020304;
  h.key = 0x1122334455667788ULL;
  const HeaderBytes bytes = encode_header(h, Payload::phantom(0x0A0B0C0D));
  auto u8 = [&](std::size_t i) { return std::to_integer<unsigned>(bytes[i]); };
  EXPECT_EQ(u8(0), 'P');
  EXPECT_EQ(u8(1), 'S');
  EXPECT_EQ(u8(2), 'T');
  EXPECT_EQ(u8(3), 'W');
  EXPECT_EQ(u8(4), kWireVersion);
  EXPECT_EQ(u8(5), kFlagPhantom);
  EXPECT_EQ(u8(6), 5u);
  EXPECT_EQ(u8(7), 0u);
  EXPECT_EQ(u8(8), 0x04u);
  EXPECT_EQ(u8(11), 0x01u);
  EXPECT_EQ(u8(40), 0x88u);
  EXPECT_EQ(u8(47), 0x11u);
  EXPECT_EQ(u8(48), 0x0Du);
  EXPECT_EQ(u8(51), 0x0Au);
  EXPECT_EQ(u8(52), 0u);
}

TEST(Codec, PhantomRoundTrip) {
  Message m;
  m.header = extreme_header();
  m.payload = Payload::phantom(std::uint64_t{3} << 30);
  const std::string frame = encode_frame(m);
  ASSERT_EQ(frame.size(), kHeaderBytes);  // no bytes follow a phantom

  Message out;
  auto err = decode(frame, out);
  ASSERT_FALSE(err) << err->to_string();
  EXPECT_TRUE(out.payload.is_phantom());
  EXPECT_EQ(out.payload.size(), std::uint64_t{3} << 30);
  EXPECT_EQ(out.header.payload_length, std::uint64_t{3} << 30);
  EXPECT_EQ(out.header.payload_crc, 0u);

  MessageHeader h;
  bool phantom = false;
  ASSERT_FALSE(decode_header(as_bytes(frame), h, phantom));
  EXPECT_TRUE(phantom);
}

TEST(Codec, LiveViewIsReadAtEncodeTime) {
  auto region = std::make_shared<ByteBuffer>(16);
  Message m;
  m.header.command = Command::kPush;
  m.payload = Payload::live_view(region);
  region->data()[5] = std::byte{0x42};  // written after the view was taken, before encoding
  const std::string frame = encode_frame(m);
  Message out;
  ASSERT_FALSE(decode(frame, out));
  EXPECT_EQ(out.payload.bytes()[5], std::byte{0x42});
  EXPECT_FALSE(out.payload.is_live());
  EXPECT_EQ(encode_header(m.header, m.payload), encode_header(m.header, m.payload.frozen()));
}

TEST(Codec, SkippingCrcWritesZero) {
  MessageHeader h;
  h.command = Command::kPull;
  const Payload p = pattern_payload(128);
  const HeaderBytes with = encode_header(h, p, true);
  const HeaderBytes without = encode_header(h, p, false);
  MessageHeader a, b;
  bool phantom = true;
  ASSERT_FALSE(decode_header(with, a, phantom));
  EXPECT_FALSE(phantom);
  ASSERT_FALSE(decode_header(without, b, phantom));
  EXPECT_EQ(a.payload_crc, payload_crc32(p.bytes()));
  EXPECT_EQ(b.payload_crc, 0u);
  EXPECT_EQ(b.payload_length, 128u);
}

TEST(Codec, PayloadCrcDetectsEveryFlippedBit) {
  const std::string good = valid_frame(40);
  for (std::size_t bit = 0; bit < 40 * 8; ++bit) {
    std::string bad = good;
    bad[kHeaderBytes + bit / 8] = static_cast<char>(bad[kHeaderBytes + bit / 8] ^ (1 << (bit % 8)));
    Message out;
    out.header.key = 77;
    auto err = decode(bad, out);
    ASSERT_TRUE(err) << "bit " << bit;
    EXPECT_EQ(err->field, "payload_crc");
    EXPECT_EQ(out.header.key, 77u);  // a rejected frame leaves the output untouched
  }
}

// The wire's CRC is zlib's CRC-32 whichever library computes it: the standard check value, and a
// bit-at-a-time reference at every length and start offset the vector kernels split differently
// (tails under 16, 64 and 256 bytes; a megabyte; unaligned starts).
TEST(Codec, PayloadCrcIsZlibCrc32AtEveryLengthAndAlignment) {
  const auto reference = [](std::span<const std::byte> bytes) {
    std::uint32_t crc = 0xFFFFFFFFu;
    for (const std::byte b : bytes) {
      crc ^= std::to_integer<std::uint32_t>(b);
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
  };
  EXPECT_EQ(payload_crc32(as_bytes(std::string("123456789"))), 0xCBF43926u);
  EXPECT_EQ(payload_crc32({}), 0u);
  std::vector<std::byte> data((1 << 20) + 64);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  for (const std::size_t offset : {0, 1, 3, 8, 17, 63}) {
    for (const std::size_t length :
         {1, 2, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1000, 4096, 4099, 1 << 20}) {
      const auto bytes = std::span<const std::byte>(data).subspan(offset, length);
      ASSERT_EQ(payload_crc32(bytes), reference(bytes)) << "offset " << offset << ", length " << length;
    }
  }
  // In pieces, as a receiver checksums what each read brought.
  const auto whole = std::span<const std::byte>(data).first(1 << 20);
  std::uint32_t crc = 0;
  for (std::size_t at = 0, piece = 1; at < whole.size(); at += piece, piece = piece * 3 + 1) {
    crc = payload_crc32_extend(crc, whole.subspan(at, std::min(piece, whole.size() - at)));
  }
  EXPECT_EQ(crc, payload_crc32(whole));
}

TEST(Codec, HeaderWithAKnownCrcIsTheSameHeader) {
  Message m;
  m.header = extreme_header();
  m.payload = pattern_payload(1000);
  EXPECT_EQ(encode_header_with_crc(m.header, m.payload, payload_crc32(m.payload.bytes())),
            encode_header(m.header, m.payload));
  const Payload phantom = Payload::phantom(1000);
  EXPECT_EQ(encode_header_with_crc(m.header, phantom, 0x1234), encode_header(m.header, phantom));
}
TEST(Codec, TruncatedHeaderAtEveryLength) {
  const std::string good = valid_frame(0);
  for (std::size_t n = 0; n < kHeaderBytes; ++n) {
    const std::string cut = good.substr(0, n);
    Message out;
    auto err = decode(cut, out);
    ASSERT_TRUE(err) << n;
    EXPECT_EQ(err->field, "header");
    EXPECT_NE(err->detail.find(std::to_string(n)), std::string::npos) << err->detail;
    EXPECT_NE(err->detail.find("64"), std::string::npos) << err->detail;
    MessageHeader h;
    bool phantom = false;
    EXPECT_TRUE(decode_header(as_bytes(cut), h, phantom));
  }
}

TEST(Codec, BadMagicNamesBothValues) {
  std::string frame = valid_frame();
  frame[0] = 'X';
  reseal(frame);
  Message out;
  auto err = decode(frame, out);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->field, "magic");
  EXPECT_NE(err->detail.find("57545350"), std::string::npos) << err->detail;
  EXPECT_NE(err->detail.find("57545358"), std::string::npos) << err->detail;
}

TEST(Codec, BadVersion) {
  std::string frame = valid_frame();
  frame[4] = 2;
  reseal(frame);
  EXPECT_EQ(field_of(frame), "version");
}

TEST(Codec, BadHeaderCrc) {
  std::string frame = valid_frame();
  frame[30] = static_cast<char>(frame[30] ^ 0x10);  // sequence byte, not resealed
  EXPECT_EQ(field_of(frame), "header_crc");
  std::string crc_only = valid_frame();
  crc_only[63] = static_cast<char>(crc_only[63] ^ 0x01);
  EXPECT_EQ(field_of(crc_only), "header_crc");
}

TEST(Codec, UnknownFlags) {
  // Bits 0-2 are known (bit 2, the CRC trailer: CrcTrailerRoundTripsAndEveryCorruptionIsNamed).
  for (int bit = 3; bit < 8; ++bit) {
    std::string frame = valid_frame();
    frame[5] = static_cast<char>(frame[5] | (1 << bit));
    reseal(frame);
    EXPECT_EQ(field_of(frame), "flags") << bit;
  }
}

TEST(Codec, BadCommand) {
  for (std::uint16_t command : {std::uint16_t{0}, std::uint16_t{kMaxCommand + 1}, std::uint16_t{0xFFFF}}) {
    std::string frame = valid_frame();
    frame[6] = static_cast<char>(command & 0xFF);
    frame[7] = static_cast<char>(command >> 8);
    reseal(frame);
    EXPECT_EQ(field_of(frame), "command") << command;
  }
}

TEST(Codec, OversizedLengthAgainstLimit) {
  Message m;
  m.header.command = Command::kPush;
  m.payload = Payload::phantom(std::uint64_t{5} << 30);
  const std::string frame = encode_frame(m);
  Message out;
  auto err = decode(frame, out);  // default limit: 4 GiB
  ASSERT_TRUE(err);
  EXPECT_EQ(err->field, "payload_length");
  EXPECT_NE(err->detail.find(std::to_string(std::uint64_t{5} << 30)), std::string::npos) << err->detail;
  EXPECT_NE(err->detail.find(std::to_string(std::uint64_t{4} << 30)), std::string::npos) << err->detail;

  // A real frame right at the limit passes, one byte over fails, whatever bytes follow.
  const std::string small = valid_frame(100);
  EXPECT_EQ(field_of(small, DecodeLimits{100}), "<accepted>");
  EXPECT_EQ(field_of(small, DecodeLimits{99}), "payload_length");

  // A hostile 2^64-1 length is refused by the header check, before any size arithmetic.
  std::string hostile = valid_frame(0);
  for (int i = 48; i < 56; ++i) hostile[static_cast<std::size_t>(i)] = static_cast<char>(0xFF);
  reseal(hostile);
  EXPECT_EQ(field_of(hostile), "payload_length");
  EXPECT_EQ(field_of(hostile, DecodeLimits{std::numeric_limits<std::uint64_t>::max()}), "payload_length");
}

TEST(Codec, FrameShorterOrLongerThanAnnounced) {
  const std::string good = valid_frame(100);
  for (std::string bad : {good.substr(0, good.size() - 1), good.substr(0, kHeaderBytes), good + "x",
                          good + std::string(1000, '\0')}) {
    Message out;
    auto err = decode(bad, out);
    ASSERT_TRUE(err) << bad.size();
    EXPECT_EQ(err->field, "payload_length");
    EXPECT_NE(err->detail.find("100"), std::string::npos) << err->detail;
    EXPECT_NE(err->detail.find(std::to_string(bad.size() - kHeaderBytes)), std::string::npos) << err->detail;
  }
}

TEST(Codec, PhantomWithTrailingBytes) {
  Message m;
  m.header.command = Command::kPull;
  m.payload = Payload::phantom(8);
  const std::string frame = encode_frame(m);
  EXPECT_EQ(field_of(frame), "<accepted>");
  EXPECT_EQ(field_of(frame + std::string(8, 'a')), "payload_length");
  EXPECT_EQ(field_of(frame + "a"), "payload_length");

  std::string with_crc = frame;  // a phantom must announce CRC 0
  with_crc[56] = 1;
  reseal(with_crc);
  EXPECT_EQ(field_of(with_crc), "payload_crc");
}

// A payload's CRC after it (kFlagCrcTrailer, the epoll van's large payloads): the frame round-trips,
// and a corrupted payload or trailer byte, a missing or extra trailer byte, a CRC in the header as
// well and a phantom with the flag are each refused naming the field. A van that carries the CRC in
// the header (ZeroMQ, UCX: decode_header with `bool& phantom`) refuses the flag.
TEST(Codec, CrcTrailerRoundTripsAndEveryCorruptionIsNamed) {
  Message m;
  m.header = extreme_header();
  m.payload = pattern_payload(300'001);
  const std::string frame = encode_frame(m, /*crc_trailer=*/true);
  ASSERT_EQ(frame.size(), kHeaderBytes + 300'001 + kTrailerBytes);
  EXPECT_EQ(static_cast<std::uint8_t>(frame[5]), kFlagResponse | kFlagCrcTrailer);
  EXPECT_EQ(frame.substr(56, 4), std::string(4, '\0'));  // payload_crc in the header: 0
  const auto crc = payload_crc32(m.payload.bytes());
  EXPECT_EQ(decode_crc_trailer(as_bytes(frame).last<kTrailerBytes>()), crc);
  const TrailerBytes little_endian{
      static_cast<std::byte>(crc & 0xFF), static_cast<std::byte>((crc >> 8) & 0xFF),
      static_cast<std::byte>((crc >> 16) & 0xFF), static_cast<std::byte>(crc >> 24)};
  EXPECT_EQ(encode_crc_trailer(crc), little_endian);
  Message out;
  auto err = decode(frame, out);
  ASSERT_FALSE(err) << err->to_string();
  EXPECT_EQ(out.header.payload_length, 300'001u);
  EXPECT_EQ(out.header.payload_crc, 0u);
  EXPECT_TRUE(std::ranges::equal(out.payload.bytes(), m.payload.bytes()));
  MessageHeader h;
  FrameShape shape;
  ASSERT_FALSE(decode_header(as_bytes(frame), h, shape));
  EXPECT_TRUE(shape.crc_trailer);
  EXPECT_FALSE(shape.phantom);
  bool phantom = false;
  const auto refused = decode_header(as_bytes(frame), h, phantom);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->field, "flags");
  EXPECT_NE(refused->detail.find("CRC after the payload"), std::string::npos) << refused->detail;

  std::string bad = frame;
  bad[kHeaderBytes + 123'457] = static_cast<char>(bad[kHeaderBytes + 123'457] ^ 0x04);
  EXPECT_EQ(field_of(bad), "payload_crc");
  bad = frame;
  bad[bad.size() - 1] = static_cast<char>(bad[bad.size() - 1] ^ 0x80);
  Message ignored;
  err = decode(bad, ignored);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->field, "payload_crc");
  EXPECT_NE(err->detail.find("trailer says"), std::string::npos) << err->detail;
  EXPECT_EQ(field_of(frame.substr(0, frame.size() - 1)), "payload_length");
  EXPECT_EQ(field_of(frame + "x"), "payload_length");
  bad = frame;
  bad[56] = 7;  // a CRC in the header too
  reseal(bad);
  EXPECT_EQ(field_of(bad), "payload_crc");
  bad = encode_frame(Message{extreme_header(), Payload::phantom(9)});
  bad[5] = static_cast<char>(bad[5] | kFlagCrcTrailer);
  reseal(bad);
  EXPECT_EQ(field_of(bad), "flags");
  // A phantom has nothing to put a CRC after.
  EXPECT_EQ(encode_frame(Message{extreme_header(), Payload::phantom(9)}, true),
            encode_frame(Message{extreme_header(), Payload::phantom(9)}));
  // An empty payload: the CRC of nothing after it.
  Message empty{extreme_header(), pattern_payload(0)};
  const std::string none = encode_frame(empty, true);
  ASSERT_EQ(none.size(), kHeaderBytes + kTrailerBytes);
  EXPECT_EQ(field_of(none), "<accepted>");
}

TEST(Codec, EverySingleBitFlipInHeaderIsRejected) {
  for (const std::string& good :
       {valid_frame(24), encode_frame(Message{extreme_header(), Payload::phantom(9)})}) {
    for (std::size_t bit = 0; bit < kHeaderBytes * 8; ++bit) {
      std::string bad = good;
      bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
      Message out;
      auto err = decode(bad, out);
      ASSERT_TRUE(err) << "bit " << bit << " accepted";
      MessageHeader h;
      bool phantom = false;
      EXPECT_TRUE(decode_header(as_bytes(bad), h, phantom)) << "bit " << bit;
    }
  }
}

TEST(Codec, ErrorChecksRunInDocumentedOrder) {
  // Bad magic and bad CRC at once: magic is reported first.
  std::string frame = valid_frame();
  frame[0] = 'Q';
  frame[4] = 9;
  EXPECT_EQ(field_of(frame), "magic");
  // Bad version beats a bad header CRC.
  frame = valid_frame();
  frame[4] = 9;
  EXPECT_EQ(field_of(frame), "version");
  // Header CRC beats flags/command.
  frame = valid_frame();
  frame[5] = static_cast<char>(0x80);
  frame[6] = 0;
  EXPECT_EQ(field_of(frame), "header_crc");
  // Flags beat command.
  frame = valid_frame();
  frame[5] = static_cast<char>(0x80);
  frame[6] = 0;
  reseal(frame);
  EXPECT_EQ(field_of(frame), "flags");
}

TEST(Codec, NamesForCommandsAndRoles) {
  EXPECT_EQ(command_name(Command::kPush), "push");
  EXPECT_EQ(command_name(Command::kNodeTable), "node_table");
  EXPECT_EQ(command_name(static_cast<Command>(0)), "unknown");
  EXPECT_EQ(role_name(Role::kWorker), "worker");
  EXPECT_EQ(role_name(Role::kScheduler), "scheduler");
  EXPECT_EQ(role_name(static_cast<Role>(200)), "unknown");
}

// Random garbage and random mutations of valid frames: every input is either rejected with a named
// field or decodes to a message that re-encodes to exactly the same bytes. Never a crash.
TEST(Codec, RandomGarbageNeverCrashes) {
  RandomStream rng(0xC0DEC, "codec-fuzz");
  const std::vector<std::string> seeds = {valid_frame(0), valid_frame(33), valid_frame(300),
                                          encode_frame(Message{extreme_header(), Payload::phantom(1 << 20)}),
                                          encode_frame(Message{extreme_header(), pattern_payload(70)}, true)};
  const std::vector<std::string> known_fields = {"header", "magic",   "version",        "header_crc",
                                                 "flags",  "command", "payload_length", "payload_crc"};
  int accepted = 0;
  int deep_rejects = 0;  // rejected after the header CRC: the mutation got past the cheap checks
  for (int round = 0; round < 20000; ++round) {
    std::string frame;
    switch (rng.below(4)) {
      case 0: {  // pure noise
        frame.resize(rng.below(200));
        for (char& c : frame) c = static_cast<char>(rng.below(256));
        break;
      }
      case 1: {  // noise behind a valid magic/version so later checks get exercised
        frame.resize(kHeaderBytes + rng.below(64));
        for (char& c : frame) c = static_cast<char>(rng.below(256));
        std::memcpy(frame.data(), "PSTW\x01", 5);
        if (rng.below(2) == 0) reseal(frame);
        break;
      }
      default: {  // a valid frame with a few random byte edits, resealed half the time
        frame = seeds[rng.below(seeds.size())];
        const auto edits = 1 + rng.below(4);
        for (std::uint64_t e = 0; e < edits; ++e) {
          const auto pos = rng.below(frame.size());
          frame[pos] = static_cast<char>(rng.below(256));
        }
        if (rng.below(3) == 0) frame.resize(rng.below(frame.size() + 16));
        if (frame.size() >= kHeaderBytes && rng.below(2) == 0) reseal(frame);
        break;
      }
    }
    Message out;
    auto err = decode(frame, out, DecodeLimits{1 << 16});
    if (err) {
      ASSERT_NE(std::find(known_fields.begin(), known_fields.end(), err->field), known_fields.end())
          << err->to_string();
      ASSERT_FALSE(err->detail.empty());
      if (err->field == "flags" || err->field == "command" || err->field == "payload_length" ||
          err->field == "payload_crc") {
        ++deep_rejects;
      }
      continue;
    }
    ++accepted;
    const bool crc_trailer = (static_cast<std::uint8_t>(frame[5]) & kFlagCrcTrailer) != 0;
    ASSERT_EQ(encode_frame(out, crc_trailer), frame)
        << "accepted frame does not re-encode identically, round " << round;
  }
  EXPECT_GT(deep_rejects, 1000);  // the generator really does reach the later checks
  EXPECT_GT(accepted, 0);         // and some edits (e.g. a resealed key change) are legitimately valid
}

}  // namespace
}  // namespace pstwin
