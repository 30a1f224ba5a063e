// The ZeroMQ runtime's own guarantees, on real sockets over 127.0.0.1: a received payload is the
// frame ZeroMQ received (not a copy) and stays valid after the sockets are gone; a sent payload
// needs no owner but the message; a reconnected connection proves membership again; with
// PSTWIN_ENCRYPT=curve no payload byte crosses the wire in the clear; pacing (here
// for the UCX van too); a real run counts its messages and records the simulator's send, receive,
// engine and compute spans.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/codec.hpp"
#include "ps/workload.hpp"
#include "realnet/local_run.hpp"
#include "realnet/ucx_runtime.hpp"
#include "realnet/van.hpp"
#include "realnet/zmq_runtime.hpp"
#include "scenario/scenario.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using namespace std::chrono_literals;

// A protocol node that keeps every message it receives; `on_start` runs on its event loop.
class Recorder final : public Node {
 public:
  explicit Recorder(std::function<void()> on_start = {}) : on_start_(std::move(on_start)) {}
  void start() override {
    if (on_start_) on_start_();
  }
  void on_message(Message message) override {
    std::lock_guard lock(mutex_);
    messages_.push_back(std::move(message));
    changed_.notify_all();
  }
  std::string describe_state() const override { return "recording"; }

  // Waits (up to 20 s, a guard against a hang, not a timing) for `count` messages.
  std::vector<Message> wait_for(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 20s, [&] { return messages_.size() >= count; });
    return messages_;
  }

 private:
  std::function<void()> on_start_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Message> messages_;
};

std::vector<std::byte> pattern(std::size_t size, unsigned seed) {
  std::vector<std::byte> bytes(size);
  for (std::size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed) % 251);
  return bytes;
}

realnet::ZmqNodeRuntime::Options labelled(std::string label) {
  realnet::ZmqNodeRuntime::Options options;
  options.label = std::move(label);
  return options;
}

// A started node whose protocol only records what it receives.
struct Receiver {
  explicit Receiver(realnet::LocalHost& host, realnet::ZmqNodeRuntime::Options options = labelled("receiver"))
      : runtime(std::make_unique<realnet::ZmqNodeRuntime>(host, std::move(options))) {
    auto owned = std::make_unique<Recorder>();
    recorder = owned.get();
    runtime->attach(std::move(owned));
    runtime->start();
  }
  std::unique_ptr<realnet::ZmqNodeRuntime> runtime;
  Recorder* recorder = nullptr;  // owned by the runtime
};

std::string as_string(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

TEST(ZmqRuntime, ReceivedPayloadIsTheFrameItselfAndOutlivesTheSockets) {
  realnet::LocalHost host({});
  Receiver receiver(host);
  auto& runtime = receiver.runtime;

  const auto body = pattern(1 << 20, 7);
  Message message;
  message.header.command = Command::kPush;
  message.header.sender = 9;
  message.header.recipient = 8;
  message.header.key = 42;
  message.payload = Payload::copy_of(body);
  const auto header = encode_header(message.header, message.payload);
  realnet::send_raw(runtime->local_address(), {as_string(header), as_string(body)});

  const auto messages = receiver.recorder->wait_for(1);
  ASSERT_EQ(messages.size(), 1u);
  const Payload payload = messages[0].payload;
  EXPECT_EQ(runtime->received_bytes_copied(), 0u);
  // A copy would live in a ByteBuffer, which is 64-byte aligned; ZeroMQ puts a large frame's bytes
  // right after its 40-byte header inside one malloc block, so they never are.
  EXPECT_NE(reinterpret_cast<std::uintptr_t>(payload.bytes().data()) % 64, 0u)
      << "the payload was copied out of the received frame";
  runtime.reset();  // closes every socket and the ZeroMQ context
  ASSERT_EQ(payload.size(), body.size());
  EXPECT_TRUE(std::equal(body.begin(), body.end(), payload.bytes().begin()));
  EXPECT_EQ(payload_crc32(payload.bytes()), messages[0].header.payload_crc);
}

// ZeroMQ keeps a message of up to 33 bytes inside the message object itself: the payload must own
// those bytes too, long after the receive that produced it.
TEST(ZmqRuntime, TinyPayloadsStayValidAfterLaterReceives) {
  realnet::LocalHost host({});
  Receiver receiver(host);
  constexpr int kMessages = 8;
  for (int i = 0; i < kMessages; ++i) {
    const auto body = pattern(20, static_cast<unsigned>(i));
    Message message;
    message.header.command = Command::kPush;
    message.header.key = static_cast<std::uint64_t>(i);
    message.payload = Payload::copy_of(body);
    realnet::send_raw(receiver.runtime->local_address(),
                      {as_string(encode_header(message.header, message.payload)), as_string(body)});
  }
  const auto messages = receiver.recorder->wait_for(kMessages);
  ASSERT_EQ(messages.size(), static_cast<std::size_t>(kMessages));
  for (const auto& message : messages) {
    const auto expected = pattern(20, static_cast<unsigned>(message.header.key));
    ASSERT_EQ(message.payload.size(), expected.size());
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), message.payload.bytes().begin()))
        << "key " << message.header.key;
  }
}

TEST(ZmqRuntime, SentPayloadsNeedNoOwnerButTheMessage) {
  realnet::LocalHost host({});
  Receiver receiver(host);

  constexpr int kMessages = 32;
  realnet::ZmqNodeRuntime sender_rt(host, labelled("sender"));
  const std::string to = receiver.runtime->local_address();
  sender_rt.attach(std::make_unique<Recorder>([&sender_rt, to] {
    sender_rt.set_self(9);
    sender_rt.connect(8, to);
    for (int i = 0; i < kMessages; ++i) {
      Message message;
      message.header.command = Command::kPush;
      message.header.recipient = 8;
      message.header.key = static_cast<std::uint64_t>(i);
      // The message holds the only reference: the buffer must live until ZeroMQ has sent it.
      message.payload = Payload::copy_of(pattern(256 * 1024, static_cast<unsigned>(i)));
      sender_rt.send(std::move(message));
    }
  }));
  sender_rt.start();

  const auto messages = receiver.recorder->wait_for(kMessages);
  ASSERT_EQ(messages.size(), static_cast<std::size_t>(kMessages));
  EXPECT_EQ(receiver.runtime->rejected_frames(), 0u);
  for (const auto& message : messages) {
    const auto expected = pattern(256 * 1024, static_cast<unsigned>(message.header.key));
    ASSERT_EQ(message.payload.size(), expected.size());
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), message.payload.bytes().begin()))
        << "key " << message.header.key;
  }
}

// A receiver that notes when each message arrived (steady clock, seconds).
class TimedRecorder final : public Node {
 public:
  void start() override {}
  void on_message(Message message) override {
    std::lock_guard lock(mutex_);
    arrivals_.push_back(
        {std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
         std::move(message)});
    changed_.notify_all();
  }
  std::string describe_state() const override { return "recording"; }
  struct Arrival {
    double at = 0;
    Message message;
  };
  // Waits (up to 30 s, a guard against a hang, not a timing) for `count` messages.
  std::vector<Arrival> wait_for(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 30s, [&] { return arrivals_.size() >= count; });
    return arrivals_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Arrival> arrivals_;
};

Message sized(NodeId to, std::uint64_t key, std::size_t bytes) {
  Message message;
  message.header.command = Command::kPush;
  message.header.recipient = to;
  message.header.key = key;
  if (bytes > 0) message.payload = Payload::copy_of(pattern(bytes, static_cast<unsigned>(key)));
  return message;
}

// A TCP relay on 127.0.0.1 between a node's DEALER and another node's ROUTER that can cut every
// connection it carries, as a failing switch or a peer's restart would, and keeps every byte the
// DEALER side sent, as someone on the path would see them.
class CuttingProxy {
 public:
  explicit CuttingProxy(std::string target) : target_port_(port_of(target)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof addr;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener_, 16) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &length) != 0)
      throw std::runtime_error("proxy: cannot listen");
    port_ = ntohs(addr.sin_port);
    if (::pipe(commands_) != 0) throw std::runtime_error("proxy: pipe");
    relay_ = std::thread([this] { run(); });
  }
  ~CuttingProxy() {
    command('q');
    relay_.join();
    for (const auto& [a, b] : pairs_) ::close(a), ::close(b);
    ::close(listener_);
    ::close(commands_[0]);
    ::close(commands_[1]);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void cut() { command('c'); }
  int accepted() const { return accepted_.load(); }
  std::string relayed() const {
    std::lock_guard lock(relayed_mutex_);
    return relayed_;
  }

 private:
  static int port_of(const std::string& address) { return std::stoi(address.substr(address.rfind(':') + 1)); }
  void command(char c) { static_cast<void>(::write(commands_[1], &c, 1)); }
  int dial() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(target_port_));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("proxy: dial");
    return fd;
  }
  void run() {
    std::array<char, 65536> buffer{};
    while (true) {
      std::vector<pollfd> fds{{commands_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
      for (const auto& [a, b] : pairs_) fds.push_back({a, POLLIN, 0}), fds.push_back({b, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      if ((fds[0].revents & POLLIN) != 0) {
        char c = 0;
        static_cast<void>(::read(commands_[0], &c, 1));
        if (c == 'q') return;
        for (const auto& [a, b] : pairs_) ::close(a), ::close(b);
        pairs_.clear();
        continue;
      }
      if ((fds[1].revents & POLLIN) != 0) {
        const int client = ::accept(listener_, nullptr, nullptr);
        if (client >= 0) {
          pairs_.emplace_back(client, dial());
          ++accepted_;
        }
        continue;
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        const auto& [a, b] = pairs_[(i - 2) / 2];
        const int from = (i % 2 == 0) ? a : b, to = (i % 2 == 0) ? b : a;
        const ssize_t n = ::read(from, buffer.data(), buffer.size());
        if (n <= 0) {
          ::close(a), ::close(b);
          pairs_.erase(pairs_.begin() + static_cast<std::ptrdiff_t>((i - 2) / 2));
          break;
        }
        if (from == a) {
          std::lock_guard lock(relayed_mutex_);
          relayed_.append(buffer.data(), static_cast<std::size_t>(n));
        }
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t w = ::write(to, buffer.data() + sent, static_cast<std::size_t>(n - sent));
          if (w <= 0) break;
          sent += w;
        }
      }
    }
  }

  int target_port_;
  int listener_ = -1;
  int port_ = 0;
  int commands_[2] = {-1, -1};
  std::vector<std::pair<int, int>> pairs_;  // (from the DEALER, to the ROUTER); the relay thread's
  std::atomic<int> accepted_{0};
  mutable std::mutex relayed_mutex_;
  std::string relayed_;
  std::thread relay_;
};

// A receiver and a sender (node 9) whose DEALER reaches it (as node 8) through a CuttingProxy and
// sends it `first` as it starts; `options` gives each node's options by its label.
struct RelayedPair {
  RelayedPair(realnet::LocalHost& host,
              const std::function<realnet::ZmqNodeRuntime::Options(std::string)>& options,
              const Message& first)
      : receiver(host, options("receiver")),
        proxy(receiver.runtime->local_address()),
        sender(host, options("sender")) {
    sender.attach(std::make_unique<Recorder>([this, first] {
      sender.set_self(9);
      sender.connect(8, proxy.address());
      sender.send(first);
    }));
    sender.start();
  }
  Receiver receiver;
  CuttingProxy proxy;
  realnet::ZmqNodeRuntime sender;
};

// With a job token, a connection ZeroMQ re-establishes after a drop is a new connection to the
// peer's ROUTER, which has proven nothing: the DEALER proves membership again and what is sent
// afterwards arrives (without that, the peer refused it as unproven, for good).
TEST(ZmqRuntime, AReconnectedDealerProvesMembershipAgainAndItsMessagesArrive) {
  std::mutex log_mutex;
  std::condition_variable logged;
  std::vector<std::string> lines;
  realnet::LocalHost::Options host_options;
  host_options.log_sink = [&](std::string_view line) {
    std::lock_guard lock(log_mutex);
    lines.emplace_back(line);
    logged.notify_all();
  };
  realnet::LocalHost host(host_options);
  const std::string token = "a-job-token-of-at-least-16-bytes";
  auto with_token = [&](std::string label) {
    auto options = labelled(std::move(label));
    options.job_token = token;
    return options;
  };
  RelayedPair pair(host, with_token, sized(8, 1, 4096));
  auto& [receiver, proxy, sender] = pair;
  ASSERT_EQ(receiver.recorder->wait_for(1).size(), 1u);

  proxy.cut();
  {
    // A guard against a hang, not a timing: the sender notices the drop at once.
    std::unique_lock lock(log_mutex);
    const bool noticed = logged.wait_for(lock, 20s, [&] {
      return std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
        return l.find("dropped; proving membership again") != l.npos;
      });
    });
    ASSERT_TRUE(noticed) << "the sender did not notice that its connection dropped";
  }
  sender.send(sized(8, 2, 4096));
  const auto messages = receiver.recorder->wait_for(2);
  ASSERT_EQ(messages.size(), 2u) << "the message sent after the reconnection never arrived";
  EXPECT_EQ(messages[1].header.key, 2u);
  EXPECT_EQ(messages[1].payload.size(), 4096u);
  EXPECT_GE(proxy.accepted(), 2);
  EXPECT_EQ(receiver.runtime->rejected_frames(), 0u);
}

// PSTWIN_ENCRYPT=curve: what crosses the wire between two members is CURVE's ciphertext. A relay
// between the sender's DEALER and the receiver's ROUTER keeps what it carried: the payload's bytes
// are there in the clear without encryption and nowhere with it, and the message arrives intact
// either way (the membership proof still runs inside the encrypted connection), even at the frame
// size limit.
TEST(Encryption, PayloadBytesCrossTheWireOnlyWithoutEncryption) {
  realnet::LocalHost host({});
  constexpr std::size_t kPayload = 4096;
  const auto sent = pattern(kPayload, 5);
  // 64 bytes of the payload: a run this long does not occur in ciphertext by chance.
  const std::string needle = as_string(std::span(sent).subspan(1000, 64));
  for (const bool encrypt : {false, true}) {
    SCOPED_TRACE(encrypt ? "encrypted" : "plain");
    auto options = [&](std::string label) {
      auto o = labelled(std::move(label));
      o.job_token = "a-job-token-of-at-least-16-bytes";
      o.encrypt = encrypt;
      o.max_payload_bytes = kPayload;  // at the limit: CURVE's sealing must not push it over
      return o;
    };
    const RelayedPair pair(host, options, sized(8, 5, kPayload));
    const auto messages = pair.receiver.recorder->wait_for(1);
    ASSERT_EQ(messages.size(), 1u);
    EXPECT_EQ(as_string(messages[0].payload.bytes()), as_string(sent));
    const std::string wire = pair.proxy.relayed();
    EXPECT_GE(wire.size(), kPayload);
    EXPECT_EQ(wire.find(needle) != std::string::npos, !encrypt)
        << (encrypt ? "the payload crossed the wire in the clear" : "the relay did not see the payload");
    EXPECT_EQ(pair.receiver.runtime->rejected_frames(), 0u);
  }
}

// The ZeroMQ van paces as the epoll van does (fpt::MessagePacer): with a NIC rate and the load
// balancer's weights, a lighter destination gets its data a message at a time at its share of the
// link while the heaviest runs free; a control message to the held destination does not wait behind
// its data; an empty table (the probe state) lifts the pacing.
// The ZeroMQ and UCX vans pace the same way (the epoll van's send pool has its own tests).
template <typename Runtime>
class Pacing : public ::testing::Test {};
struct VanName {
  template <typename Runtime>
  static std::string GetName(int) {
    return std::is_same_v<Runtime, realnet::ZmqNodeRuntime> ? "zmq" : "ucx";
  }
};
using PacedVans = ::testing::Types<realnet::ZmqNodeRuntime, realnet::UcxNodeRuntime>;
TYPED_TEST_SUITE(Pacing, PacedVans, VanName);

TYPED_TEST(Pacing, ALightDestinationGetsItsShareOfTheNicAndControlPasses) {
  using Runtime = TypeParam;
  if constexpr (std::is_same_v<Runtime, realnet::UcxNodeRuntime>) {
    if (const auto missing = realnet::van_unavailable(realnet::Van::kUcx); !missing.empty())
      GTEST_SKIP() << missing;
  }
  constexpr double kNicRate = 8e6;  // bytes/s: the light destination's share (1 of 4) is 2 MB/s
  constexpr int kMessages = 24;
  constexpr std::size_t kPayload = 64 * 1024;
  constexpr NodeId kHeavy = 8, kLight = 7;
  realnet::LocalHost host({});
  auto make_receiver = [&host](const std::string& label, TimedRecorder*& recorder) {
    auto runtime = std::make_unique<Runtime>(host, labelled(label));
    auto owned = std::make_unique<TimedRecorder>();
    recorder = owned.get();
    runtime->attach(std::move(owned));
    runtime->start();
    return runtime;
  };
  TimedRecorder* heavy = nullptr;
  TimedRecorder* light = nullptr;
  const auto heavy_rt = make_receiver("heavy", heavy);
  const auto light_rt = make_receiver("light", light);
  auto options = labelled("sender");
  options.nic_rate_Bps = kNicRate;
  Runtime sender(host, options);
  const std::string heavy_address = heavy_rt->local_address(), light_address = light_rt->local_address();
  sender.attach(std::make_unique<Recorder>([&] {
    sender.set_self(9);
    sender.connect(kHeavy, heavy_address);
    sender.connect(kLight, light_address);
    sender.set_send_weights(1, std::vector<PeerWeight>{{kHeavy, 3}, {kLight, 1}});
    for (int i = 0; i < kMessages; ++i) {
      sender.send(sized(kHeavy, static_cast<std::uint64_t>(i), kPayload));
      sender.send(sized(kLight, static_cast<std::uint64_t>(i), kPayload));
    }
  }));
  sender.start();

  // While the light destination's data is held, a control message (no payload) goes at once.
  ASSERT_GE(light->wait_for(2).size(), 2u);
  sender.post([&] { sender.send(sized(kLight, 1000, 0)); });
  const auto heavy_got = heavy->wait_for(kMessages);
  const auto light_got = light->wait_for(kMessages + 1);
  ASSERT_EQ(heavy_got.size(), static_cast<std::size_t>(kMessages));
  ASSERT_EQ(light_got.size(), static_cast<std::size_t>(kMessages + 1));
  const double light_span = light_got.back().at - light_got.front().at;
  // After its first message, the light destination's bytes left at no more than 2 MB/s.
  const double wire = static_cast<double>(kHeaderBytes + kPayload);
  EXPECT_GE(light_span, (kMessages - 1) * wire / (kNicRate / 4) * 0.95) << light_span << " s";
  EXPECT_LT(heavy_got.back().at, light_got.back().at) << "the unpaced destination finishes first";
  // Posted once two data messages had arrived, it came long before the held data was through
  // (at the data's pace, 33 ms a message, it would have been last).
  std::size_t control_at = light_got.size();
  for (std::size_t i = 0; i < light_got.size(); ++i)
    if (light_got[i].message.header.key == 1000) control_at = i;
  EXPECT_LE(control_at, static_cast<std::size_t>(kMessages / 2))
      << "the control message waited behind held data";

  // Lifted: the same bytes to the light destination now leave as fast as ZeroMQ sends them.
  sender.post([&] {
    sender.set_send_weights(2, {});
    for (int i = 0; i < kMessages; ++i)
      sender.send(sized(kLight, 2000 + static_cast<std::uint64_t>(i), kPayload));
  });
  const auto lifted = light->wait_for(2 * kMessages + 1);
  ASSERT_EQ(lifted.size(), static_cast<std::size_t>(2 * kMessages + 1));
  const double lifted_span = lifted.back().at - lifted[kMessages + 1].at;
  EXPECT_LT(lifted_span, light_span / 2) << "lifted " << lifted_span << " s, paced " << light_span << " s";
}

TEST(ZmqRuntime, RealRunCountsMessagesAndRecordsTheSimulatorsSpans) {
  const auto scenario =
      load_scenario(PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml", {{"workload.iterations", "2"}});
  const auto report = realnet::run_local(scenario);
  ASSERT_TRUE(report.ok()) << report.failure;
  EXPECT_EQ(report.trace_dropped, 0u);

  std::map<std::string, std::uint64_t> by_category;
  std::uint64_t aggregates = 0;
  std::map<std::string, std::uint64_t> sends_by_node;
  for (const auto& span : report.trace) {
    ++by_category[span.category];
    EXPECT_LE(span.start_s, span.end_s) << span.category << " " << span.name;
    if (span.category == "engine" && span.name == "aggregate") ++aggregates;
    if (span.category == "send") {
      ++sends_by_node[span.process];
      EXPECT_TRUE(span.thread.starts_with("send->")) << span.thread;
    }
    if (span.category == "receive") {
      EXPECT_TRUE(span.thread.starts_with("recv<-")) << span.thread;
    }
  }
  // One send span per message counted; everything sent before the last stop was received.
  EXPECT_GT(report.messages, 0u);
  EXPECT_EQ(by_category["send"], report.messages);
  EXPECT_GT(by_category["receive"], 0u);
  EXPECT_LE(by_category["receive"], by_category["send"]);
  // Every node sent something: 1 scheduler, 2 servers, 4 workers.
  EXPECT_EQ(sends_by_node.size(), 7u);
  // Each server sums every worker's push of every partition once per iteration.
  const SyntheticWorkload workload(scenario);
  EXPECT_EQ(aggregates, workload.partitions().size() * 4 * 2);
  EXPECT_EQ(by_category["compute"], 4u * 2u);  // one per worker and iteration
  EXPECT_GT(by_category["copy"], 0u);
  EXPECT_GT(by_category["push"], 0u);
  // Wire bytes: every message's 64-byte header plus its payload; payloads dominate.
  EXPECT_GT(report.message_bytes, report.messages * kHeaderBytes);
}

// `pstwin run` merges every node process's count and spans into the same results.json and
// trace.json schema as the simulator's.
TEST(ZmqRuntime, PstwinRunReportsMessagesAndOneTraceOfEveryNode) {
  const auto dir = std::filesystem::temp_directory_path() / ("pstwin-zmq-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  testing::ChildProcess run({"run", "scenarios/quickstart.toml", "--van", "zmq", "--out",
                             (dir / "out").string(), "-q", "--set", "workload.iterations=2"},
                            dir / "log");
  const auto code = run.wait_until(std::chrono::steady_clock::now() + 60s);
  const auto results = nlohmann::json::parse(testing::read_text(dir / "out" / "results.json"));
  const auto trace = nlohmann::json::parse(testing::read_text(dir / "out" / "trace.json"));
  std::filesystem::remove_all(dir);
  ASSERT_EQ(code, 0) << run.output();

  const auto messages = results.at("messages").get<std::uint64_t>();
  EXPECT_GT(messages, 0u);
  EXPECT_GT(results.at("message_bytes").get<std::uint64_t>(), messages * kHeaderBytes);
  std::map<std::string, std::uint64_t> by_category;
  std::set<std::string> processes;
  std::set<int> pids_with_sends;
  std::uint64_t aggregates = 0;
  std::map<std::uint32_t, std::uint64_t> pushes_by_iteration;  // sent and received
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") == "M" && event.at("name") == "process_name")
      processes.insert(event.at("args").at("name").get<std::string>());
    if (event.at("ph") != "X") continue;
    const auto category = event.at("cat").get<std::string>();
    ++by_category[category];
    if (category == "send") pids_with_sends.insert(event.at("pid").get<int>());
    // Every message span names what it carried (key, iteration, wire bytes: a header at least).
    if (category == "send" || category == "receive") {
      const auto& args = event.at("args");
      EXPECT_GE(args.at("bytes").get<std::uint64_t>(), kHeaderBytes) << event.dump();
      EXPECT_LT(args.at("iteration").get<std::uint32_t>(), 3u) << event.dump();
      if (event.at("name") == "push" || event.at("name") == "push_pull")  // separate or fused (the default)
        ++pushes_by_iteration[args.at("iteration").get<std::uint32_t>()];
    }
    if (category == "engine" && event.at("name") == "aggregate") ++aggregates;
  }
  EXPECT_EQ(processes, (std::set<std::string>{"scheduler", "server 0", "server 1", "worker 0", "worker 1",
                                              "worker 2", "worker 3"}));
  EXPECT_EQ(pids_with_sends.size(), 7u);
  EXPECT_EQ(by_category["send"], messages);
  EXPECT_GT(by_category["receive"], 0u);
  EXPECT_EQ(by_category["compute"], 4u * 2u);
  const auto scenario = load_scenario(PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml");
  EXPECT_EQ(aggregates, SyntheticWorkload(scenario).partitions().size() * 4 * 2);
  const std::uint64_t pushes = SyntheticWorkload(scenario).partitions().size() * 4 * 2;  // sent + received
  EXPECT_EQ(pushes_by_iteration, (std::map<std::uint32_t, std::uint64_t>{{0, pushes}, {1, pushes}}));
}

}  // namespace
}  // namespace pstwin
