// The epoll TCP transport on real sockets over 127.0.0.1: frames of every size arrive whole and in
// order, priorities win under a send backlog, a peer closing mid-frame or sending garbage is reported
// (never a hang or a crash), and stop() joins while traffic flows.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/codec.hpp"
#include "realnet/buffer_pool.hpp"
#include "realnet/epoll_transport.hpp"

namespace pstwin::realnet {
namespace {

using namespace std::chrono_literals;

// Collects what a transport delivers and reports; waits are guards against a hang (20 s), not timings.
class Inbox {
 public:
  EpollTransport::Callbacks callbacks() {
    return {[this](Message m) {
              std::lock_guard lock(mutex_);
              if (hold_) changed_.wait(mutex_, [&] { return !hold_; });
              messages_.push_back(std::move(m));
              changed_.notify_all();
            },
            [this](const TransportError& e) {
              std::lock_guard lock(mutex_);
              errors_.push_back(e);
              changed_.notify_all();
            }};
  }
  std::vector<Message> wait_messages(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 20s, [&] { return messages_.size() >= count; });
    return messages_;
  }
  std::vector<TransportError> wait_errors(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 20s, [&] { return errors_.size() >= count; });
    return errors_;
  }
  void hold(bool on) {
    std::lock_guard lock(mutex_);
    hold_ = on;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable_any changed_;
  bool hold_ = false;
  std::vector<Message> messages_;
  std::vector<TransportError> errors_;
};

Message make(std::uint64_t key, std::uint64_t bytes, std::int32_t priority = 0) {
  auto buffer = std::make_shared<ByteBuffer>(bytes);
  auto span = buffer->bytes();
  for (std::size_t i = 0; i < span.size(); ++i) span[i] = static_cast<std::byte>((i * 31 + key) & 0xFF);
  Message m;
  m.header.command = Command::kPush;
  m.header.key = key;
  m.header.priority = priority;
  m.payload = Payload::adopt(std::move(buffer));
  return m;
}

bool pattern_ok(const Message& m) {
  const auto bytes = m.payload.bytes();
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != static_cast<std::byte>((i * 31 + m.header.key) & 0xFF)) return false;
  }
  return true;
}

// A raw client socket to a transport's listener, for writing bad bytes by hand.
int raw_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  return fd;
}

TEST(EpollTransport, FramesOfEverySizeArriveWholeAndInOrder) {
  Inbox a_in, b_in;
  EpollTransport a(2, {}, a_in.callbacks());
  EpollTransport b(3, {}, b_in.callbacks());
  ASSERT_FALSE(a.connect(3, "127.0.0.1", b.port()).has_value());
  ASSERT_FALSE(b.connect(2, "127.0.0.1", a.port()).has_value());
  std::vector<std::uint64_t> sizes = {0,    1,     63,    64,        65,      4095,
                                      4096, 16383, 16384, 65536 + 7, 1 << 20, 16 << 20};
  for (std::uint64_t i = 0; i < 200; ++i) sizes.push_back((i * 7919 * 13) % 300000);
  for (std::uint64_t k = 0; k < sizes.size(); ++k) {
    ASSERT_FALSE(a.send(3, make(k, sizes[k])).has_value());
    if (k % 10 == 0) {
      ASSERT_FALSE(b.send(2, make(k, sizes[k])).has_value());
    }
  }
  const auto got = b_in.wait_messages(sizes.size());
  ASSERT_EQ(got.size(), sizes.size());
  // Header-only messages are control traffic and may overtake data (as in every backend); data
  // keeps its send order.
  std::vector<bool> seen(sizes.size());
  std::uint64_t previous_data = 0;
  for (const auto& m : got) {
    const std::uint64_t k = m.header.key;
    ASSERT_LT(k, sizes.size());
    EXPECT_FALSE(seen[k]) << "key " << k << " twice";
    seen[k] = true;
    EXPECT_EQ(m.header.sender, 2);
    EXPECT_EQ(m.header.recipient, 3);
    EXPECT_EQ(m.payload.size(), sizes[k]);
    EXPECT_TRUE(pattern_ok(m)) << "key " << k;
    if (sizes[k] > 0) {
      EXPECT_GE(k, previous_data) << "data out of order";
      previous_data = k;
    }
  }
  EXPECT_EQ(a_in.wait_messages((sizes.size() + 9) / 10).size(), (sizes.size() + 9) / 10);
  EXPECT_EQ(a.stats(3).sent_messages, sizes.size());
  EXPECT_TRUE(a_in.wait_errors(0).empty());
  EXPECT_TRUE(b_in.wait_errors(0).empty());
}

TEST(EpollTransport, HigherPriorityOvertakesABacklog) {
  Inbox a_in, b_in;
  EpollTransport a(2, {}, a_in.callbacks());
  EpollTransport b(3, {}, b_in.callbacks());
  ASSERT_FALSE(a.connect(3, "127.0.0.1", b.port()).has_value());
  b_in.hold(true);  // the receiver stalls on its first message: the socket fills, the pool backs up
  const Message low = make(0, 1 << 20);
  for (std::uint64_t k = 0; k < 100; ++k) {
    Message m{low.header, low.payload};
    m.header.key = k;
    ASSERT_FALSE(a.send(3, std::move(m)).has_value());
  }
  for (std::uint64_t k = 1000; k < 1005; ++k) ASSERT_FALSE(a.send(3, make(k, 1 << 20, 10)).has_value());
  b_in.hold(false);
  const auto got = b_in.wait_messages(105);
  ASSERT_EQ(got.size(), 105u);
  std::size_t last_high = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].header.key >= 1000) last_high = i;
  }
  // FIFO would put them at 100..104; what the socket and one batch held when they came is at most ~20 MB.
  EXPECT_LT(last_high, 50u);
  std::uint64_t previous_low = 0;
  for (const auto& m : got) {
    if (m.header.key >= 1000) continue;
    EXPECT_GE(m.header.key, previous_low);  // equal priorities keep their order
    previous_low = m.header.key;
  }
}

TEST(EpollTransport, PeerClosingMidFrameIsReportedByName) {
  Inbox in;
  EpollTransport b(3, {}, in.callbacks());
  Message m = make(7, 1000);
  m.header.sender = 9;
  m.header.recipient = 3;
  const std::string frame = encode_frame(m);
  const int fd = raw_connect(b.port());
  ASSERT_EQ(::write(fd, frame.data(), 64 + 10), 74);
  ::close(fd);
  const auto errors = in.wait_errors(1);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].peer.find("(node 9)"), std::string::npos) << errors[0].to_string();
  EXPECT_NE(errors[0].detail.find("mid-frame, after 10 of 1000 payload bytes of key 7"), std::string::npos)
      << errors[0].to_string();
  EXPECT_TRUE(in.wait_messages(0).empty());

  // The sending side: a peer that goes away is reported with its node id, and sends are refused after.
  Inbox a_in;
  EpollTransport a(2, {}, a_in.callbacks());
  ASSERT_FALSE(a.connect(3, "127.0.0.1", b.port()).has_value());
  b.stop();
  for (std::uint64_t k = 0; k < 1000 && a_in.wait_errors(0).empty(); ++k) {
    if (a.send(3, make(k, 1 << 16)).has_value()) break;
    std::this_thread::sleep_for(1ms);
  }
  const auto send_errors = a_in.wait_errors(1);
  ASSERT_FALSE(send_errors.empty());
  EXPECT_NE(send_errors[0].peer.find("connection to node 3 at 127.0.0.1:"), std::string::npos)
      << send_errors[0].to_string();
  EXPECT_TRUE(a.send(3, make(1, 1)).has_value());
}

TEST(EpollTransport, MalformedFramesAreRejectedAndTheConnectionDropped) {
  Inbox in;
  EpollTransport::Options options;
  options.limits.max_payload_bytes = 1 << 20;
  EpollTransport b(3, options, in.callbacks());

  const int garbage = raw_connect(b.port());
  const std::string junk(64, 'x');
  ASSERT_EQ(::write(garbage, junk.data(), junk.size()), 64);
  auto errors = in.wait_errors(1);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "magic");
  char byte = 0;
  EXPECT_LE(::read(garbage, &byte, 1), 0);  // dropped: EOF or reset
  ::close(garbage);

  Message big = make(1, 0);
  big.header.sender = 9;
  big.header.recipient = 3;
  // A header announcing 2 MiB, over this receiver's 1 MiB limit.
  HeaderBytes header = encode_header(big.header, Payload::copy_of(std::vector<std::byte>(2 << 20)), false);
  const int huge = raw_connect(b.port());
  ASSERT_EQ(::write(huge, header.data(), header.size()), 64);
  errors = in.wait_errors(2);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[1].field, "payload_length");
  ::close(huge);

  Message wrong = make(2, 100);
  wrong.header.sender = 9;
  wrong.header.recipient = 4;  // not this node
  const std::string frame = encode_frame(wrong);
  const int misrouted = raw_connect(b.port());
  ASSERT_EQ(::write(misrouted, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  errors = in.wait_errors(3);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[2].field, "recipient");
  ::close(misrouted);
  EXPECT_TRUE(in.wait_messages(0).empty());
}

// With a job key, a peer's frames are read only after it answered the challenge with the same key:
// members' frames arrive; another job's node and a node without the key are refused and closed,
// counted against their host, and nothing of theirs is delivered.
TEST(EpollTransport, ConnectionsProveTheJobKeyBeforeTheirFramesAreRead) {
  EpollTransport::Options ours;
  ours.job_key.emplace("the token of this job, long enough");
  EpollTransport::Options theirs;
  theirs.job_key.emplace("another job's token, long enough");
  Inbox a_in, b_in, c_in, d_in;
  EpollTransport b(3, ours, b_in.callbacks());
  EpollTransport a(2, ours, a_in.callbacks());
  EpollTransport c(4, theirs, c_in.callbacks());
  EpollTransport d(5, {}, d_in.callbacks());
  ASSERT_FALSE(a.connect(3, "127.0.0.1", b.port()).has_value());
  ASSERT_FALSE(c.connect(3, "127.0.0.1", b.port()).has_value());
  ASSERT_FALSE(d.connect(3, "127.0.0.1", b.port()).has_value());
  for (std::uint64_t k = 0; k < 5; ++k) {
    ASSERT_FALSE(a.send(3, make(k, 100000)).has_value());
    static_cast<void>(c.send(3, make(100 + k, 1000)));
    static_cast<void>(d.send(3, make(200 + k, 1000)));
  }
  const auto got = b_in.wait_messages(5);
  const auto errors = b_in.wait_errors(2);
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& e : errors) {
    EXPECT_TRUE(e.refused) << e.to_string();
    EXPECT_EQ(e.who, "127.0.0.1") << e.to_string();
    EXPECT_NE(e.detail.find("wrong membership proof"), std::string::npos) << e.to_string();
  }
  ASSERT_EQ(got.size(), 5u);
  for (const auto& m : got) {
    EXPECT_EQ(m.header.sender, 2);
    EXPECT_TRUE(pattern_ok(m));
  }
}

// A flood of connections evicts the oldest still proving membership, a slow member's among them: the
// member sees its connection close before the proof was accepted, so nothing of its was read, and it
// opens another; every message arrives once.
TEST(EpollTransport, AMemberEvictedWhileProvingMembershipConnectsAgainAndLosesNothing) {
  EpollTransport::Options server_options;
  server_options.job_key.emplace("the token of this job, long enough");
  server_options.max_unproven = 2;
  EpollTransport::Options member_options;
  member_options.job_key = server_options.job_key;
  member_options.own_threads = false;  // it answers the challenge only when this test polls it
  Inbox a_in, b_in;
  EpollTransport b(3, server_options, b_in.callbacks());
  EpollTransport a(2, member_options, a_in.callbacks());
  ASSERT_FALSE(a.connect(3, "127.0.0.1", b.port()).has_value());
  for (std::uint64_t k = 0; k < 5; ++k) ASSERT_FALSE(a.send(3, make(k, 50000)).has_value());
  // Two outsiders after it: the second one's challenge comes once the member's connection was
  // evicted (accepts are in order; at the cap the oldest goes).
  std::vector<int> outsiders;
  for (int i = 0; i < 2; ++i) {
    outsiders.push_back(raw_connect(b.port()));
    std::array<char, kHandshakeBytes> challenge{};
    ASSERT_EQ(::recv(outsiders.back(), challenge.data(), challenge.size(), MSG_WAITALL),
              static_cast<ssize_t>(challenge.size()));
  }
  const auto evicted = b_in.wait_errors(1);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_NE(evicted[0].detail.find("the oldest of 2 connections proving membership"), std::string::npos)
      << evicted[0].to_string();
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < until && !a.drain(10)) {
  }
  const auto got = b_in.wait_messages(5);
  ASSERT_EQ(got.size(), 5u);
  for (std::uint64_t k = 0; k < 5; ++k) {
    EXPECT_EQ(got[k].header.key, k);
    EXPECT_TRUE(pattern_ok(got[k]));
  }
  EXPECT_TRUE(a_in.wait_errors(0).empty()) << a_in.wait_errors(0)[0].to_string();
  for (const int fd : outsiders) ::close(fd);
}

std::size_t open_descriptors() {
  return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                                std::filesystem::directory_iterator()));
}

// Out of file descriptors, a listener refuses new connections (accepts each on a spare descriptor
// and closes it) and goes on: once descriptors are free again, a new connection's frames arrive.
TEST(EpollTransport, OutOfDescriptorsRefusesNewConnectionsAndGoesOn) {
  Inbox in;
  EpollTransport b(3, {}, in.callbacks());
  rlimit normal{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &normal), 0);
  int ready[2];
  int done[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(done), 0);
  // The clients are another process: their descriptors do not count against this one's limit.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(b.port());
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char go = 0;
    if (::read(ready[0], &go, 1) != 1) ::_exit(1);
    for (int i = 0; i < 20; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) ::_exit(1);
    }
    ::read(done[0], &go, 1);  // holds them until told
    ::_exit(0);
  }
  rlimit low = normal;
  low.rlim_cur = open_descriptors() + 3;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  ASSERT_EQ(::write(ready[1], "g", 1), 1);
  const auto errors = in.wait_errors(1);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &normal), 0);
  ASSERT_EQ(::write(done[1], "d", 1), 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (const int fd : {ready[0], ready[1], done[0], done[1]}) ::close(fd);
  ASSERT_FALSE(errors.empty());
  EXPECT_TRUE(errors[0].refused) << errors[0].to_string();
  EXPECT_NE(errors[0].detail.find("out of file descriptors"), std::string::npos) << errors[0].to_string();

  Message m = make(9, 5000);
  m.header.sender = 2;
  m.header.recipient = 3;
  const std::string frame = encode_frame(m);
  const int fd = raw_connect(b.port());
  ASSERT_EQ(::write(fd, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
  const auto got = in.wait_messages(1);
  ::close(fd);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(pattern_ok(got[0]));
}

// The receiver checksums a payload piece by piece as the reads bring it in: with a 4 KiB read
// budget a 1 MiB payload takes hundreds of reads, split between the in-place and the staging path.
TEST(EpollTransport, PayloadCrcIsCheckedAcrossManyReads) {
  Inbox in;
  EpollTransport::Options options;
  options.read_budget = 4096;
  EpollTransport b(3, options, in.callbacks());
  auto frame_of = [](std::uint64_t key) {
    Message m = make(key, (1 << 20) + 7);
    m.header.sender = 9;
    m.header.recipient = 3;
    return encode_frame(m);
  };
  std::string bad = frame_of(2);
  bad[kHeaderBytes + 700001] = static_cast<char>(bad[kHeaderBytes + 700001] ^ 0x10);
  const std::string both = frame_of(1) + bad;
  const int fd = raw_connect(b.port());
  for (std::size_t at = 0; at < both.size();) {
    const ssize_t n = ::write(fd, both.data() + at, std::min<std::size_t>(both.size() - at, 100003));
    ASSERT_GT(n, 0);
    at += static_cast<std::size_t>(n);
  }
  const auto errors = in.wait_errors(1);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "payload_crc");
  EXPECT_NE(errors[0].detail.find("payload of key 2"), std::string::npos) << errors[0].detail;
  const auto got = in.wait_messages(1);
  ASSERT_EQ(got.size(), 1u);  // the good frame, and only it
  EXPECT_EQ(got[0].header.key, 1u);
  EXPECT_TRUE(pattern_ok(got[0]));
  ::close(fd);
}

// A payload sent to several peers is checksummed once per batch; frames whose bytes differ (another
// buffer, or a slice starting at the same address with another length) must not share that CRC.
// A payload over 256 KiB leaves with its CRC after it (codec.hpp's trailer, checksummed piece by
// piece as it is written); a small one with the CRC in its header. Both decode as frames.
TEST(EpollTransport, LargePayloadsLeaveWithTheirCrcAfterThem) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  socklen_t length = sizeof address;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);

  Inbox in;
  EpollTransport a(2, {}, in.callbacks());
  ASSERT_FALSE(a.connect(3, "127.0.0.1", ntohs(address.sin_port)).has_value());
  const int fd = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(fd, 0);
  const std::uint64_t large = (3 << 20) + 5, small = 4096;
  ASSERT_FALSE(a.send(3, make(1, large)).has_value());
  ASSERT_FALSE(a.send(3, make(2, small)).has_value());
  const std::size_t total = 2 * kHeaderBytes + large + kTrailerBytes + small;
  std::string wire(total, '\0');
  for (std::size_t at = 0; at < total;) {
    const ssize_t n = ::read(fd, wire.data() + at, total - at);
    ASSERT_GT(n, 0);
    at += static_cast<std::size_t>(n);
  }
  ::close(fd);
  ::close(listener);

  const auto bytes = std::as_bytes(std::span(wire));
  const std::size_t first = kHeaderBytes + large + kTrailerBytes;
  EXPECT_EQ(std::to_integer<int>(bytes[5]) & kFlagCrcTrailer, kFlagCrcTrailer);
  EXPECT_EQ(std::to_integer<int>(bytes[first + 5]) & kFlagCrcTrailer, 0);
  Message got;
  const auto error = decode_frame(bytes.first(first), got);
  ASSERT_FALSE(error) << error->to_string();
  EXPECT_EQ(got.header.key, 1u);
  EXPECT_EQ(got.header.payload_crc, 0u);  // it follows the payload
  EXPECT_TRUE(pattern_ok(got));
  const auto second = decode_frame(bytes.subspan(first), got);
  ASSERT_FALSE(second) << second->to_string();
  EXPECT_EQ(got.header.key, 2u);
  EXPECT_EQ(got.header.payload_crc, payload_crc32(got.payload.bytes()));
  EXPECT_TRUE(pattern_ok(got));
}

// A frame with its CRC after a multi-piece payload: a byte corrupted in the payload or in the
// trailer is refused naming payload_crc, a forged header CRC beside the trailer too, a frame cut
// in its trailer is reported lost where it stopped; the frames before each arrive.
TEST(EpollTransport, ACrcTrailerIsCheckedAndACorruptOrCutOneRefused) {
  Inbox in;
  EpollTransport::Options options;
  options.read_budget = 64 * 1024;  // the payload in many reads, the trailer in the staging buffer
  EpollTransport b(3, options, in.callbacks());
  const std::size_t size = (2 << 20) + 11;
  auto frame_of = [&](std::uint64_t key) {
    Message m = make(key, size);
    m.header.sender = 9;
    m.header.recipient = 3;
    return encode_frame(m, /*crc_trailer=*/true);
  };
  // False once the receiver closed the connection (it may, as soon as it refuses a frame).
  const auto send_all = [](int fd, const std::string& bytes) {
    for (std::size_t at = 0; at < bytes.size();) {
      const ssize_t n =
          ::send(fd, bytes.data() + at, std::min<std::size_t>(bytes.size() - at, 100003), MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<std::size_t>(n);
    }
    return true;
  };
  std::string in_payload = frame_of(11);
  in_payload[kHeaderBytes + 1'500'001] = static_cast<char>(in_payload[kHeaderBytes + 1'500'001] ^ 0x10);
  std::string in_trailer = frame_of(12);
  in_trailer[kHeaderBytes + size + 2] = static_cast<char>(in_trailer[kHeaderBytes + size + 2] ^ 0x01);
  std::string forged = frame_of(13);  // a CRC in the header as well as after the payload
  forged[56] = 1;
  const auto crc = payload_crc32(std::as_bytes(std::span(forged)).first(60));
  for (int i = 0; i < 4; ++i)
    forged[60 + static_cast<std::size_t>(i)] = static_cast<char>((crc >> (8 * i)) & 0xFF);

  std::size_t expected_messages = 0;
  for (const std::string* bad : {&in_payload, &in_trailer, &forged}) {
    const int fd = raw_connect(b.port());
    ASSERT_TRUE(send_all(fd, frame_of(1)));
    send_all(fd, *bad);
    const auto errors = in.wait_errors(expected_messages + 1);
    ASSERT_EQ(errors.size(), expected_messages + 1);
    EXPECT_EQ(errors.back().field, "payload_crc") << errors.back().to_string();
    EXPECT_TRUE(errors.back().refused) << errors.back().to_string();
    if (bad != &forged) {
      EXPECT_NE(errors.back().detail.find("trailer after the payload says"), std::string::npos)
          << errors.back().detail;
    }
    ++expected_messages;
    const auto got = in.wait_messages(expected_messages);
    ASSERT_EQ(got.size(), expected_messages);  // the good frame before it, and only it
    EXPECT_EQ(got.back().header.key, 1u);
    EXPECT_TRUE(pattern_ok(got.back()));
    ::close(fd);
  }

  const int fd = raw_connect(b.port());
  ASSERT_TRUE(send_all(fd, frame_of(1)));
  const std::string cut = frame_of(14);
  ASSERT_TRUE(send_all(fd, cut.substr(0, cut.size() - 2)));
  ASSERT_EQ(in.wait_messages(expected_messages + 1).size(), expected_messages + 1);
  ::close(fd);
  const auto errors = in.wait_errors(4);
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_TRUE(errors.back().lost) << errors.back().to_string();
  EXPECT_NE(errors.back().detail.find("after the payload of key 14, 2 of the 4 bytes of its CRC"),
            std::string::npos)
      << errors.back().to_string();
}

TEST(EpollTransport, OnePayloadToSeveralPeersArrivesIntactAtEach) {
  Inbox a_in, b_in, c_in;
  EpollTransport a(2, {}, a_in.callbacks());
  EpollTransport b(3, {}, b_in.callbacks());
  EpollTransport c(4, {}, c_in.callbacks());
  ASSERT_FALSE(a.connect(3, "127.0.0.1", b.port()).has_value());
  ASSERT_FALSE(a.connect(4, "127.0.0.1", c.port()).has_value());
  const Message p = make(5, 1 << 20);
  const Message q = make(6, 1 << 20);
  std::vector<Message> order;
  for (int round = 0; round < 4; ++round) {
    order.push_back(p);
    order.push_back(p);
    Message half{p.header, p.payload.slice(0, 1 << 19)};  // same start, other length
    order.push_back(half);
    order.push_back(q);
  }
  for (std::size_t i = 0; i < order.size(); ++i)
    ASSERT_FALSE(a.send(i % 2 == 0 ? 3 : 4, order[i]).has_value());
  const auto at_b = b_in.wait_messages(order.size() / 2);
  const auto at_c = c_in.wait_messages(order.size() / 2);
  ASSERT_EQ(at_b.size() + at_c.size(), order.size());
  for (const auto* got : {&at_b, &at_c}) {
    for (const auto& m : *got)
      EXPECT_TRUE(pattern_ok(m)) << "key " << m.header.key << ", " << m.payload.size();
  }
  EXPECT_TRUE(b_in.wait_errors(0).empty());
  EXPECT_TRUE(c_in.wait_errors(0).empty());
}

// Kernel pacing (a link rate set, Pacing::kKernel): a connection lighter than the heaviest gets
// SO_MAX_PACING_RATE = link rate x weight / total weight, the heaviest and an equal split none.
TEST(EpollTransport, KernelPacingSetsTheSocketsPacingRate) {
  constexpr auto kUnpaced = std::numeric_limits<std::uint64_t>::max();
  Inbox a_in, b_in, c_in;
  EpollTransport::Options paced;
  paced.pool.link_rate_Bps = 1e9;
  paced.pacing = EpollTransport::Options::Pacing::kKernel;
  EpollTransport a(2, paced, a_in.callbacks());
  EpollTransport b(3, EpollTransport::Options{}, b_in.callbacks());
  EpollTransport c(4, EpollTransport::Options{}, c_in.callbacks());
  ASSERT_FALSE(a.connect(3, "127.0.0.1", b.port()).has_value());
  EXPECT_EQ(a.pacing_rate(3), kUnpaced);  // no weights yet
  ASSERT_FALSE(a.set_weights(1, std::vector<PeerWeight>{{3, 4}, {4, 1}}).has_value());
  ASSERT_FALSE(a.connect(4, "127.0.0.1", c.port()).has_value());  // connected after the table
  EXPECT_EQ(a.pacing_rate(3), kUnpaced);
  EXPECT_EQ(a.pacing_rate(4), 200'000'000u);
  EXPECT_FALSE(a.pacing_rate(9).has_value());  // not connected
  ASSERT_FALSE(a.set_weights(2, std::vector<PeerWeight>{{3, 1}, {4, 3}}).has_value());
  EXPECT_EQ(a.pacing_rate(3), 250'000'000u);
  EXPECT_EQ(a.pacing_rate(4), kUnpaced);
  ASSERT_FALSE(a.set_weights(3, std::vector<PeerWeight>{{3, 1}, {4, 1}}).has_value());
  EXPECT_EQ(a.pacing_rate(3), kUnpaced);
  EXPECT_EQ(a.pacing_rate(4), kUnpaced);
  // Traffic still flows on paced connections.
  ASSERT_FALSE(a.set_weights(4, std::vector<PeerWeight>{{3, 4}, {4, 1}}).has_value());
  ASSERT_FALSE(a.send(4, make(7, 64 * 1024)).has_value());
  const auto got = c_in.wait_messages(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(pattern_ok(got[0]));
  // Without a link rate nothing is paced, whatever the weights.
  EpollTransport d(5, EpollTransport::Options{}, a_in.callbacks());
  ASSERT_FALSE(d.connect(3, "127.0.0.1", b.port()).has_value());
  ASSERT_FALSE(d.set_weights(1, std::vector<PeerWeight>{{3, 1}, {4, 4}}).has_value());
  EXPECT_EQ(d.pacing_rate(3), kUnpaced);
  // User pacing (the default) holds connections itself and leaves the kernel's rate alone.
  EpollTransport::Options user;
  user.pool.link_rate_Bps = 1e9;
  EpollTransport e(6, user, a_in.callbacks());
  ASSERT_FALSE(e.connect(3, "127.0.0.1", b.port()).has_value());
  ASSERT_FALSE(e.set_weights(1, std::vector<PeerWeight>{{3, 1}, {4, 4}}).has_value());
  EXPECT_EQ(e.pacing_rate(3), kUnpaced);
}

// What a transport delivered and when, for the shaping tests: their bounds are lower bounds on the
// time a rate-limited flow takes, which load on the machine can only make longer.
class TimedInbox {
 public:
  using Clock = std::chrono::steady_clock;
  struct Arrival {
    NodeId sender = kNoNode;
    std::uint64_t bytes = 0;
    Clock::time_point at;
  };
  // A flow's bytes after its first message, the seconds from its first arrival to its last, the last.
  struct Span {
    std::uint64_t bytes = 0;
    double seconds = 0;
    Clock::time_point last;
  };
  EpollTransport::Callbacks callbacks() {
    return {[this](Message m) {
              std::lock_guard lock(mutex_);
              arrivals_.push_back({m.header.sender, kHeaderBytes + m.payload.size(), Clock::now()});
              changed_.notify_all();
            },
            {}};
  }
  std::vector<Arrival> wait_for(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 30s, [&] { return arrivals_.size() >= count; });
    return arrivals_;
  }
  // Over arrivals [from, end) from `sender` (kNoNode: any).
  static Span span(const std::vector<Arrival>& arrivals, NodeId sender, std::size_t from = 0) {
    std::uint64_t bytes = 0, first_bytes = 0;
    Clock::time_point first{}, last{};
    for (std::size_t i = from; i < arrivals.size(); ++i) {
      if (sender != kNoNode && arrivals[i].sender != sender) continue;
      if (bytes == 0) {
        first = arrivals[i].at;
        first_bytes = arrivals[i].bytes;
      }
      bytes += arrivals[i].bytes;
      last = arrivals[i].at;
    }
    return {bytes - first_bytes, std::chrono::duration<double>(last - first).count(), last};
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Arrival> arrivals_;
};

// The pool's pacing on real sockets: with weights 4:1 the light destination's connection is held to
// a fifth of the link, the heavy one not at all. By the van (Pacing::kUser) a message at a time; by
// the kernel (SO_MAX_PACING_RATE), whose TCP pacing lets a flow run a little over its cap (5.4 MB/s
// for 5 on this machine's loopback). The bound allows a quarter more. With `own_threads` false the sender is
// driven as the epoll van drives it: pump() and poll() on the owner's thread, the poll cut short when a held
// connection is due.
void expect_pacing_holds_a_light_destination_to_its_share(EpollTransport::Options::Pacing pacing,
                                                          bool own_threads) {
  constexpr double kLinkRate = 8e6;  // bytes/s: the light destination's share (1 of 5) is 1.6 MB/s
  constexpr int kMessages = 32;
  constexpr std::uint64_t kPayload = 64 * 1024;
  EpollTransport::Options paced;
  paced.pool.link_rate_Bps = kLinkRate;
  paced.pacing = pacing;
  paced.own_threads = own_threads;
  Inbox unused;
  TimedInbox heavy_in, light_in;
  EpollTransport sender(2, paced, unused.callbacks());
  std::jthread owner;
  if (!own_threads)
    owner = std::jthread([&sender](std::stop_token stop) {
      while (!stop.stop_requested()) {
        sender.pump();
        sender.poll(50);
      }
    });
  EpollTransport heavy(3, EpollTransport::Options{}, heavy_in.callbacks());
  EpollTransport light(4, EpollTransport::Options{}, light_in.callbacks());
  ASSERT_FALSE(sender.set_weights(1, std::vector<PeerWeight>{{3, 4}, {4, 1}}).has_value());
  ASSERT_FALSE(sender.connect(3, "127.0.0.1", heavy.port()).has_value());
  ASSERT_FALSE(sender.connect(4, "127.0.0.1", light.port()).has_value());
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_FALSE(sender.send(3, make(static_cast<std::uint64_t>(i), kPayload)).has_value());
    ASSERT_FALSE(sender.send(4, make(static_cast<std::uint64_t>(i), kPayload)).has_value());
  }
  const auto to_heavy = heavy_in.wait_for(kMessages);
  const auto to_light = light_in.wait_for(kMessages);
  ASSERT_EQ(to_heavy.size(), static_cast<std::size_t>(kMessages));
  ASSERT_EQ(to_light.size(), static_cast<std::size_t>(kMessages));
  // The second half only: the connection's first window may leave before pacing has a rate to go by.
  const auto light_span = TimedInbox::span(to_light, kNoNode, kMessages / 2);
  const auto heavy_span = TimedInbox::span(to_heavy, kNoNode);
  EXPECT_GE(light_span.seconds, static_cast<double>(light_span.bytes) / (1.25 * kLinkRate / 5))
      << light_span.bytes << " bytes";
  EXPECT_LT(heavy_span.last, light_span.last) << "the unpaced destination finishes first";
}

TEST(EpollTransport, UserPacingHoldsALightDestinationToItsShare) {
  expect_pacing_holds_a_light_destination_to_its_share(EpollTransport::Options::Pacing::kUser, true);
}

TEST(EpollTransport, UserPacingHoldsALightDestinationToItsShareWhenPolled) {
  expect_pacing_holds_a_light_destination_to_its_share(EpollTransport::Options::Pacing::kUser, false);
}

TEST(EpollTransport, KernelPacingHoldsALightDestinationToItsShare) {
  expect_pacing_holds_a_light_destination_to_its_share(EpollTransport::Options::Pacing::kKernel, true);
}

// Receive-side shaping on real sockets: the receiver reads a lighter sender's connection no faster
// than its share of the link, and TCP's flow control holds the sender to that; the heaviest is not
// shaped; an empty table lifts it, from a paused connection too. With `own_threads` false the hub is
// driven as the epoll van drives it: poll() on the owner's thread.
void expect_receive_shaping_holds_a_lighter_sender_to_its_share(bool own_threads) {
  constexpr double kLinkRate = 8e6;             // bytes/s: the light sender's share (1 of 4) is 2 MB/s
  constexpr std::uint64_t kBurst = 128 * 1024;  // the shaper's bucket depth at this rate
  constexpr int kMessages = 48;
  constexpr std::uint64_t kPayload = 64 * 1024;
  TimedInbox in;
  EpollTransport::Options options;
  options.pool.link_rate_Bps = kLinkRate;
  options.own_threads = own_threads;
  EpollTransport hub(1, options, in.callbacks());
  std::jthread owner;
  if (!own_threads)
    owner = std::jthread([&hub](std::stop_token stop) {
      while (!stop.stop_requested()) hub.poll(50);
    });
  Inbox unused;
  EpollTransport heavy(2, EpollTransport::Options{}, unused.callbacks());
  EpollTransport light(3, EpollTransport::Options{}, unused.callbacks());
  EXPECT_EQ(hub.receive_rate(3), 0.0);  // no table yet
  ASSERT_FALSE(hub.set_receive_weights(1, std::vector<PeerWeight>{{2, 3}, {3, 1}}).has_value());
  EXPECT_EQ(hub.receive_rate(2), 0.0);
  EXPECT_DOUBLE_EQ(hub.receive_rate(3), kLinkRate / 4);
  ASSERT_TRUE(hub.set_receive_weights(1, std::vector<PeerWeight>{{3, 1}}).has_value());  // stale version
  ASSERT_FALSE(heavy.connect(1, "127.0.0.1", hub.port()).has_value());
  ASSERT_FALSE(light.connect(1, "127.0.0.1", hub.port()).has_value());
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_FALSE(heavy.send(1, make(static_cast<std::uint64_t>(i), kPayload)).has_value());
    ASSERT_FALSE(light.send(1, make(static_cast<std::uint64_t>(i), kPayload)).has_value());
  }
  auto got = in.wait_for(2 * kMessages);
  ASSERT_EQ(got.size(), 2U * kMessages);
  const auto light_span = TimedInbox::span(got, 3);
  const auto heavy_span = TimedInbox::span(got, 2);
  // After its first message the light sender's bytes were read at most at 2 MB/s, plus the bucket's
  // depth and what the read that completed the first message took of the next (at most a burst).
  EXPECT_GE(light_span.seconds, (static_cast<double>(light_span.bytes) - 2.0 * kBurst) / (kLinkRate / 4))
      << light_span.bytes << " bytes";
  EXPECT_LT(heavy_span.last, light_span.last) << "the unshaped sender finishes first";
  for (const auto& m : got) EXPECT_EQ(m.bytes, kHeaderBytes + kPayload);

  // Lifted (the load balancer's probe state): the light sender is read as fast as it comes.
  ASSERT_FALSE(hub.set_receive_weights(2, {}).has_value());
  EXPECT_EQ(hub.receive_rate(3), 0.0);
  for (int i = 0; i < kMessages; ++i)
    ASSERT_FALSE(light.send(1, make(static_cast<std::uint64_t>(i), kPayload)).has_value());
  got = in.wait_for(3 * kMessages);
  ASSERT_EQ(got.size(), 3U * kMessages);
  const auto unshaped = TimedInbox::span(got, 3, 2 * kMessages);
  EXPECT_LT(unshaped.seconds, static_cast<double>(unshaped.bytes) / (kLinkRate / 4))
      << "no faster than the shaped rate: shaping was not lifted";
}

TEST(EpollTransport, ReceiveShapingHoldsALighterSenderToItsShare) {
  expect_receive_shaping_holds_a_lighter_sender_to_its_share(true);
}

TEST(EpollTransport, ReceiveShapingWorksWhenTheOwnersThreadPolls) {
  expect_receive_shaping_holds_a_lighter_sender_to_its_share(false);
}

TEST(EpollTransport, StopWhileTrafficFlowsJoinsCleanly) {
  for (int round = 0; round < 5; ++round) {
    Inbox a_in, b_in;
    auto a = std::make_unique<EpollTransport>(2, EpollTransport::Options{}, a_in.callbacks());
    auto b = std::make_unique<EpollTransport>(3, EpollTransport::Options{}, b_in.callbacks());
    ASSERT_FALSE(a->connect(3, "127.0.0.1", b->port()).has_value());
    ASSERT_FALSE(b->connect(2, "127.0.0.1", a->port()).has_value());
    const Message m = make(1, 256 * 1024);
    for (int i = 0; i < 200; ++i) {
      ASSERT_FALSE(a->send(3, Message{m.header, m.payload}).has_value());
      ASSERT_FALSE(b->send(2, Message{m.header, m.payload}).has_value());
    }
    b_in.wait_messages(static_cast<std::size_t>(round * 10));  // stop at different points
    if (round % 2 == 0) {
      a->stop();
      b->stop();
    }
    b.reset();
    a.reset();
  }
}

// Received payloads of 16 KiB and more reuse the buffers of payloads the receiver let go.
TEST(EpollTransport, ReceiveBuffersAreReusedOnceReleased) {
  std::mutex mutex;
  std::condition_variable arrived;
  int intact = 0;
  int received = 0;
  EpollTransport::Callbacks drop_after_check{[&](Message m) {  // the payload goes when this returns
                                               std::lock_guard lock(mutex);
                                               intact += pattern_ok(m) ? 1 : 0;
                                               ++received;
                                               arrived.notify_all();
                                             },
                                             {}};
  Inbox a_in;
  EpollTransport a(2, EpollTransport::Options{}, a_in.callbacks());
  EpollTransport b(3, EpollTransport::Options{}, drop_after_check);
  ASSERT_FALSE(a.connect(3, "127.0.0.1", b.port()).has_value());
  for (int i = 1; i <= 3; ++i) {
    ASSERT_FALSE(a.send(3, make(static_cast<std::uint64_t>(i), 100000)).has_value());
    std::unique_lock lock(mutex);
    ASSERT_TRUE(arrived.wait_for(lock, 20s, [&] { return received == i; }));
  }
  EXPECT_EQ(intact, 3);
  EXPECT_EQ(b.reused_buffers(), 2u);  // the second and third frames reused the first one's buffer
}

TEST(BufferPool, ReusesReleasedBuffersUpToItsCap) {
  auto pool = BufferPool::create(300 * 1024);
  const std::byte* first = nullptr;
  {
    auto buffer = pool->take(200 * 1024);
    first = buffer->data();
    EXPECT_EQ(buffer->size(), 200u * 1024);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 64, 0u);
  }
  EXPECT_EQ(pool->cached_bytes(), 200u * 1024);
  auto again = pool->take(200 * 1024 - 10);  // rounds to the same 4 KiB capacity
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(pool->reused(), 1u);
  EXPECT_EQ(pool->cached_bytes(), 0u);
  {
    auto other = pool->take(200 * 1024);  // a fresh one: the cached buffer is in use
    EXPECT_NE(other->data(), first);
  }
  again.reset();  // over the cap: freed, not cached
  EXPECT_EQ(pool->cached_bytes(), 200u * 1024);
  // Buffers outlive the last outside reference to the pool.
  auto late = pool->take(4096);
  pool.reset();
  late->data()[0] = std::byte{1};
  late.reset();
}

}  // namespace
}  // namespace pstwin::realnet
