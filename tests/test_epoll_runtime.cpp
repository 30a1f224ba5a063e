// The epoll van (EpollNodeRuntime over FPT's epoll transport) on real sockets over 127.0.0.1: the
// quickstart job passes every invariant and ends with the simulator's and the ZeroMQ van's model in
// sync and async mode, in one process and as `pstwin run --van epoll`; a peer closing mid-message
// costs that message, named, not the node; messages to a lost peer are held until it listens again;
// a peer that listens late still gets its messages in order; pushes filled when the credit releases them keep
// their iteration's values; a bad DMLC_PS_VAN_TYPE is refused naming the variable and the choices.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/codec.hpp"
#include "realnet/epoll_runtime.hpp"
#include "realnet/local_run.hpp"
#include "realnet/loop_pool.hpp"
#include "realnet/node_env.hpp"
#include "scenario/scenario.hpp"
#include "sim/simulation.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Scenario scenario(const std::string& file, std::vector<std::pair<std::string, std::string>> overrides = {}) {
  overrides.emplace_back("workload.iterations", "3");
  overrides.emplace_back("output.trace", "false");
  return load_scenario(PSTWIN_SOURCE_DIR "/scenarios/" + file, overrides);
}

std::string problems(const RunReport& report) {
  std::string out = report.failure;
  for (const auto& v : report.violations) out += "\n" + v.invariant + ": " + v.detail;
  return out;
}

// Every push and pull response (separate or fused) the nodes of a trace.json received, as (name, key,
// iteration, wire bytes) from the spans' args: what a per-key analysis of a trace reads (docs/FPT.md).
std::multiset<std::tuple<std::string, std::uint64_t, std::uint32_t, std::uint64_t>> received_data(
    const nlohmann::json& trace) {
  std::multiset<std::tuple<std::string, std::uint64_t, std::uint32_t, std::uint64_t>> out;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.at("ph") != "X" || event.at("cat") != "receive") continue;
    const auto name = event.at("name").get<std::string>();
    if (name != "push" && name != "pull response" && name != "push_pull" && name != "push_pull response")
      continue;
    const auto& args = event.at("args");
    out.emplace(name, args.at("key").get<std::uint64_t>(), args.at("iteration").get<std::uint32_t>(),
                args.at("bytes").get<std::uint64_t>());
  }
  return out;
}

realnet::LocalRunOptions over(realnet::Van van) {
  realnet::LocalRunOptions options;
  options.van = van;
  options.timeout_s = 60;
  return options;
}

// Sync mode, real payloads, fixed summation order: the same final model whatever moves the bytes.
TEST(EpollVan, QuickstartSyncEndsWithTheSimulatorsAndZeroMqsModel) {
  const auto sc = scenario("quickstart.toml");
  const auto simulated = sim::run_isolated({sc}, 1);  // forks: before this test starts any thread
  ASSERT_EQ(simulated.size(), 1u);
  ASSERT_TRUE(simulated[0].ok()) << problems(simulated[0]);
  const auto epoll = realnet::run_local(sc, over(realnet::Van::kEpoll));
  ASSERT_TRUE(epoll.ok()) << problems(epoll);
  EXPECT_EQ(epoll.van, "epoll");
  EXPECT_EQ(epoll.iterations.size(), 3u);
  EXPECT_GT(epoll.invariants_checked, 0u);
  EXPECT_EQ(epoll.violation_count, 0u);
  EXPECT_FALSE(epoll.model_digest.empty());
  EXPECT_EQ(epoll.model_digest, simulated[0].model_digest);
  const auto zmq = realnet::run_local(sc, over(realnet::Van::kZmq));
  ASSERT_TRUE(zmq.ok()) << problems(zmq);
  EXPECT_EQ(zmq.van, "zmq");
  EXPECT_EQ(epoll.model_digest, zmq.model_digest);
  ASSERT_TRUE(epoll.invariant_tallies.contains("aggregates"));
  EXPECT_EQ(epoll.invariant_tallies.at("aggregates").checked, zmq.invariant_tallies.at("aggregates").checked);
  // The fused push_pull (one request, the reply carries the aggregate) ends with the same model.
  const auto fused = realnet::run_local(scenario("quickstart.toml", {{"ps.push_pull", "fused"}}),
                                        over(realnet::Van::kEpoll));
  ASSERT_TRUE(fused.ok()) << problems(fused);
  EXPECT_EQ(fused.model_digest, simulated[0].model_digest);
}

// Without staging, a synthetic push is filled when the credit releases it (Worker::fill_on_release_):
// with a credit of one most pushes wait, and each must still carry the values of the iteration it was
// staged in, so every aggregate checks and the model is the staged simulator's, in sync and async mode.
TEST(EpollVan, PushesFilledWhenTheCreditReleasesThemCarryTheirIterationsValues) {
  for (const std::string file : {"quickstart.toml", "async_quickstart.toml"}) {
    const auto simulated = sim::run_isolated({scenario(file)}, 1);
    ASSERT_EQ(simulated.size(), 1u);
    ASSERT_TRUE(simulated[0].ok()) << problems(simulated[0]);
    const auto unstaged =
        realnet::run_local(scenario(file, {{"staging.enabled", "false"}, {"ps.scheduling_credit", "1"}}),
                           over(realnet::Van::kEpoll));
    ASSERT_TRUE(unstaged.ok()) << file << ": " << problems(unstaged);
    EXPECT_EQ(unstaged.violation_count, 0u) << file;
    ASSERT_TRUE(unstaged.invariant_tallies.contains("aggregates")) << file;
    EXPECT_GT(unstaged.invariant_tallies.at("aggregates").checked, 0u) << file;
    EXPECT_EQ(unstaged.model_digest, simulated[0].model_digest) << file;
  }
}

// Async: pushes applied on arrival, yet every update lands exactly once, so the final stores agree.
TEST(EpollVan, AsyncQuickstartEndsWithTheSimulatorsFinalModel) {
  const auto sc = scenario("async_quickstart.toml");
  const auto simulated = sim::run_isolated({sc}, 1);
  ASSERT_EQ(simulated.size(), 1u);
  ASSERT_TRUE(simulated[0].ok()) << problems(simulated[0]);
  const auto epoll = realnet::run_local(sc, over(realnet::Van::kEpoll));
  ASSERT_TRUE(epoll.ok()) << problems(epoll);
  EXPECT_GT(epoll.invariants_checked, 0u);
  EXPECT_FALSE(epoll.model_digest.empty());
  EXPECT_EQ(epoll.model_digest, simulated[0].model_digest);
}

// `pstwin run --van epoll`: one `pstwin node` process per node, each told DMLC_PS_VAN_TYPE=epoll.
TEST(EpollVan, PstwinRunWithTheEpollVanWritesItsResults) {
  const auto dir = testing::fresh_dir("epoll-run");
  const auto sim = testing::run_pstwin("sim scenarios/quickstart.toml -q --set workload.iterations=2 --out " +
                                       (dir / "sim").string());
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  testing::ChildProcess run({"run", "scenarios/quickstart.toml", "-q", "--van", "epoll", "--set",
                             "workload.iterations=2", "--out", (dir / "run").string()},
                            dir / "run.log");
  ASSERT_EQ(run.wait_until(Clock::now() + 60s), 0) << run.output();
  const auto results = testing::read_json(dir / "run" / "results.json");
  EXPECT_EQ(results["van"], "epoll");
  EXPECT_TRUE(results["completed"].get<bool>());
  EXPECT_EQ(results["iterations"].size(), 2u);
  EXPECT_EQ(results["invariants"]["violation_count"], 0);
  EXPECT_GT(results["invariants"]["checked"].get<std::uint64_t>(), 0u);
  const std::string digest = testing::read_json(dir / "sim" / "results.json")["model_digest"];
  EXPECT_FALSE(digest.empty());
  EXPECT_EQ(results["model_digest"], digest);
  // The trace names each message's key, iteration and bytes, the same in the simulator's trace:
  // 4 workers x 2 iterations x 7 keys of 1 MB partitions, pushed and pulled.
  const auto real = received_data(testing::read_json(dir / "run" / "trace.json"));
  EXPECT_EQ(real.size(), 2u * 4 * 2 * 7);
  EXPECT_EQ(real, received_data(testing::read_json(dir / "sim" / "trace.json")));
}

TEST(EpollVan, UnknownVanIsBadInput) {
  const auto run = testing::run_pstwin("run scenarios/quickstart.toml -q --van tcp");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--van"), std::string::npos) << run.output;
  std::map<std::string, std::string> env{{"DMLC_ROLE", "worker"},       {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                         {"DMLC_PS_ROOT_PORT", "1234"}, {"DMLC_NUM_WORKER", "1"},
                                         {"DMLC_NUM_SERVER", "1"},      {"DMLC_WORKER_ID", "0"}};
  EXPECT_EQ(realnet::parse_node_env(env).van, realnet::Van::kEpoll);  // the default
  env["PSTWIN_JOB_TOKEN"] = std::string(64, 'a');
  env["PSTWIN_ENCRYPT"] = "curve";
  EXPECT_EQ(realnet::parse_node_env(env).van, realnet::Van::kZmq);  // the default when encrypted
  env.erase("PSTWIN_ENCRYPT");
  env["DMLC_PS_VAN_TYPE"] = "zmq";
  EXPECT_EQ(realnet::parse_node_env(env).van, realnet::Van::kZmq);
  env["DMLC_PS_VAN_TYPE"] = "epoll";
  EXPECT_EQ(realnet::parse_node_env(env).van, realnet::Van::kEpoll);
  env["DMLC_PS_VAN_TYPE"] = "ibverbs";
  try {
    realnet::parse_node_env(env);
    ADD_FAILURE() << "DMLC_PS_VAN_TYPE=ibverbs was accepted";
  } catch (const realnet::NodeEnvError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("DMLC_PS_VAN_TYPE=\"ibverbs\""), std::string::npos) << text;
    EXPECT_NE(text.find("zmq, epoll"), std::string::npos) << text;
  }
}

// A protocol stand-in: records what it receives and, at start, sends what it was given.
class Recorder final : public Node {
 public:
  Recorder(Runtime& rt, std::vector<std::pair<NodeId, std::string>> peers, std::vector<Message> to_send)
      : rt_(rt), peers_(std::move(peers)), to_send_(std::move(to_send)) {}
  void start() override {
    for (const auto& [id, address] : peers_) rt_.connect(id, address);
    for (auto& message : to_send_) rt_.send(std::move(message));
  }
  void on_message(Message message) override {
    std::lock_guard lock(mutex_);
    received_.push_back(std::move(message));
  }
  std::string describe_state() const override { return "recording"; }
  std::vector<Message> received() const {
    std::lock_guard lock(mutex_);
    return received_;
  }

 private:
  Runtime& rt_;
  std::vector<std::pair<NodeId, std::string>> peers_;
  std::vector<Message> to_send_;
  mutable std::mutex mutex_;
  std::vector<Message> received_;
};

realnet::NodeRuntimeOptions labelled(std::string label, std::string bind = "127.0.0.1:*") {
  realnet::NodeRuntimeOptions options;
  options.label = std::move(label);
  options.bind = std::move(bind);
  return options;
}

// A push of `bytes` bytes whose byte i is (i + key) mod 256.
Message numbered(NodeId to, std::uint64_t key, std::uint64_t bytes) {
  std::vector<std::byte> body(bytes);
  std::ranges::generate(body, [i = key]() mutable { return static_cast<std::byte>(i++ & 0xFF); });
  return Message{MessageHeader{.recipient = to, .command = Command::kPush, .key = key},
                 Payload::copy_of(body)};
}

// 127.0.0.1:port (0: any port, for bind).
sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// A port nothing listens on (bound once, then released).
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = loopback(0);
  socklen_t length = sizeof address;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), length), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  ::close(fd);
  return ntohs(address.sin_port);
}

// A node sends before its peer's process listens (as workers may start before the scheduler under
// `pstwin run`): the messages wait, in order, until the connection opens.
TEST(EpollVan, MessagesToAPeerThatListensLateArriveInOrder) {
  realnet::LocalHost host({});
  const std::string late_address = "127.0.0.1:" + std::to_string(free_port());
  constexpr int kMessages = 50;
  std::vector<Message> to_send;
  for (int i = 0; i < kMessages; ++i) to_send.push_back(numbered(9, static_cast<std::uint64_t>(i), 3000));
  realnet::EpollNodeRuntime sender(host, labelled("sender"));
  sender.attach(std::make_unique<Recorder>(
      sender, std::vector<std::pair<NodeId, std::string>>{{9, late_address}}, std::move(to_send)));
  sender.start();
  std::this_thread::sleep_for(100ms);  // at least one refused connection attempt
  realnet::EpollNodeRuntime receiver(host, labelled("receiver", late_address));
  receiver.set_self(9);
  auto recorder = std::make_unique<Recorder>(receiver, std::vector<std::pair<NodeId, std::string>>{},
                                             std::vector<Message>{});
  const Recorder& received = *recorder;
  receiver.attach(std::move(recorder));
  receiver.start();
  const auto deadline = Clock::now() + 20s;
  while (received.received().size() < kMessages && Clock::now() < deadline && !host.failed())
    std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(host.failed()) << host.failure();
  const auto messages = received.received();
  ASSERT_EQ(messages.size(), static_cast<std::size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) {
    EXPECT_EQ(messages[static_cast<std::size_t>(i)].header.key, static_cast<std::uint64_t>(i));
    const auto bytes = messages[static_cast<std::size_t>(i)].payload.bytes();
    ASSERT_EQ(bytes.size(), 3000u);
    EXPECT_EQ(bytes[100], static_cast<std::byte>((100 + i) & 0xFF));
  }
}

std::size_t open_fds() {
  return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                                std::filesystem::directory_iterator()));
}

// Two nodes exchange traffic (and start executor lanes), then go: every socket, epoll set and eventfd
// they opened is closed again, and every thread joined (the destructors return).
TEST(EpollVan, StoppedNodesLeaveNoFileDescriptorOpen) {
  const std::size_t before = open_fds();
  {
    realnet::LocalHost host({});
    auto receiver = std::make_unique<realnet::EpollNodeRuntime>(host, labelled("receiver"));
    receiver->set_self(9);
    auto recorder = std::make_unique<Recorder>(*receiver, std::vector<std::pair<NodeId, std::string>>{},
                                               std::vector<Message>{});
    const Recorder& received = *recorder;
    receiver->attach(std::move(recorder));
    receiver->start();
    std::vector<Message> to_send;
    for (int i = 0; i < 20; ++i) to_send.push_back(numbered(9, static_cast<std::uint64_t>(i), 40000));
    auto sender = std::make_unique<realnet::EpollNodeRuntime>(host, labelled("sender"));
    sender->attach(std::make_unique<Recorder>(
        *sender, std::vector<std::pair<NodeId, std::string>>{{9, receiver->local_address()}},
        std::move(to_send)));
    sender->executor("engine", 2)
        .submit(
            1, "task", {}, [] {}, [] {});
    sender->start();
    const auto deadline = Clock::now() + 20s;
    while (received.received().size() < 20 && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(received.received().size(), 20u);
    EXPECT_GT(open_fds(), before);
    sender.reset();
    receiver.reset();
    EXPECT_FALSE(host.failed()) << host.failure();  // the receiver saw the sender close between frames
  }
  EXPECT_EQ(open_fds(), before);
}

// The sockets of a raw "node 11" that sends us frames by hand.
int connect_raw(const std::string& address) {
  const auto port = static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in to = loopback(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to), 0);
  return fd;
}

// Log lines of every node of a LocalHost.
struct LogLines {
  std::mutex mutex;
  std::vector<std::string> lines;
  realnet::LocalHost::Options options() {
    realnet::LocalHost::Options out;
    out.log_sink = [this](std::string_view line) {
      std::lock_guard lock(mutex);
      lines.emplace_back(line);
    };
    return out;
  }
  std::string all() {
    std::lock_guard lock(mutex);
    std::string out;
    for (const auto& line : lines) out += line + "\n";
    return out;
  }
  std::string with(std::string_view part) {
    std::lock_guard lock(mutex);
    for (const auto& line : lines)
      if (line.find(part) != std::string::npos) return line;
    return {};
  }
};

// "server 0" (node 9), started, recording what it receives, its host logging every line.
struct RecordingServer {
  RecordingServer() : host(log.options()), node(host, labelled("server 0")) {
    node.set_self(9);
    auto recorder = std::make_unique<Recorder>(node, std::vector<std::pair<NodeId, std::string>>{},
                                               std::vector<Message>{});
    received = recorder.get();
    node.attach(std::move(recorder));
    node.start();
  }
  LogLines log;
  realnet::LocalHost host;
  realnet::EpollNodeRuntime node;
  const Recorder* received = nullptr;
};

// A peer whose connection closes in the middle of a message (its process died, or the network broke):
// that message is lost, the node says so naming the connection and where the frame stopped, and goes
// on: the heartbeats, not the transport, decide whether the peer is dead. Its next connection's
// messages arrive.
TEST(EpollVan, PeerClosingMidMessageLosesThatMessageNamingThePeerAndTheNodeGoesOn) {
  RecordingServer server;
  auto& [log, host, node, recorded] = server;
  const Recorder& received = *recorded;

  const int fd = connect_raw(node.local_address());
  Message message = numbered(9, 77, 1000);
  message.header.sender = 11;
  const auto header = encode_header(message.header, message.payload, /*compute_crc=*/true);
  ASSERT_EQ(::send(fd, header.data(), header.size(), 0), static_cast<ssize_t>(header.size()));
  ASSERT_EQ(::send(fd, message.payload.bytes().data(), 10, 0), 10);
  ::close(fd);

  const int again = connect_raw(node.local_address());
  Message next = numbered(9, 78, 1000);
  next.header.sender = 11;
  const auto next_header = encode_header(next.header, next.payload, /*compute_crc=*/true);
  ASSERT_EQ(::send(again, next_header.data(), next_header.size(), 0),
            static_cast<ssize_t>(next_header.size()));
  ASSERT_EQ(::send(again, next.payload.bytes().data(), 1000, 0), 1000);
  const auto deadline = Clock::now() + 20s;
  while (received.received().empty() && Clock::now() < deadline && !host.failed())
    std::this_thread::sleep_for(5ms);
  ::close(again);

  EXPECT_FALSE(host.failed()) << host.failure();
  const auto messages = received.received();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].header.key, 78u);
  const std::string line = log.with("mid-frame");
  EXPECT_NE(line.find("server 0"), std::string::npos) << line;
  EXPECT_NE(line.find("connection from 127.0.0.1:"), std::string::npos) << line;
  EXPECT_NE(line.find("(node 11)"), std::string::npos) << line;
  EXPECT_NE(line.find("after 10 of 1000 payload bytes of key 77; the message being read was lost"),
            std::string::npos)
      << line;
  node.halt();
  EXPECT_EQ(node.transport_errors(), 1u);
}

// A member whose stream goes out of step (a frame of `bytes` whose payload fails its CRC, the CRC in
// the header or, as the epoll van sends payloads over 1 MiB, after the payload) loses that
// connection, counted as a refusal against it and named payload_crc; no single message stops the
// node, and the member's next connection is read as before.
void expect_a_corrupt_frame_refused_and_the_node_going_on(std::size_t bytes, bool crc_trailer,
                                                          std::size_t corrupt_at) {
  RecordingServer server;
  auto& [log, host, node, recorded] = server;
  const Recorder& received = *recorded;
  auto frame_of = [&](std::uint64_t key, bool corrupt) {
    Message message = numbered(9, key, bytes);
    message.header.sender = 11;
    std::string frame = encode_frame(message, crc_trailer);
    if (corrupt)
      frame[kHeaderBytes + corrupt_at] = static_cast<char>(frame[kHeaderBytes + corrupt_at] ^ 0x5A);
    return frame;
  };
  const auto send_all = [](int fd, const std::string& frame) {
    for (std::size_t at = 0; at < frame.size();) {
      const ssize_t n = ::send(fd, frame.data() + at, frame.size() - at, MSG_NOSIGNAL);
      ASSERT_GT(n, 0);
      at += static_cast<std::size_t>(n);
    }
  };
  const auto wait_for = [&](std::size_t count) {
    const auto deadline = Clock::now() + 20s;
    while (received.received().size() < count && Clock::now() < deadline && !host.failed())
      std::this_thread::sleep_for(5ms);
  };
  const int first = connect_raw(node.local_address());
  send_all(first, frame_of(76, false));
  wait_for(1);  // a member now
  send_all(first, frame_of(77, true));
  const auto deadline = Clock::now() + 20s;
  while (node.refusals().empty() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  char byte = 0;
  EXPECT_LE(::read(first, &byte, 1), 0);  // dropped: EOF or reset
  ::close(first);

  const int again = connect_raw(node.local_address());
  send_all(again, frame_of(78, false));
  wait_for(2);
  ::close(again);

  EXPECT_FALSE(host.failed()) << host.failure();
  const auto messages = received.received();
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[0].header.key, 76u);
  EXPECT_EQ(messages[1].header.key, 78u);
  EXPECT_TRUE(std::ranges::equal(messages[1].payload.bytes(), numbered(9, 78, bytes).payload.bytes()));
  const auto refusals = node.refusals();
  ASSERT_TRUE(refusals.contains("node 11")) << log.all();
  EXPECT_EQ(refusals.at("node 11"), 1u);
  const std::string line = log.with("payload_crc");
  EXPECT_NE(line.find("payload of key 77 (" + std::to_string(bytes) + " bytes)"), std::string::npos) << line;
  EXPECT_NE(line.find("connection dropped (the member opens another)"), std::string::npos) << log.all();
  node.halt();
}

TEST(EpollVan, AMembersCorruptFrameIsRefusedAndTheNodeGoesOn) {
  expect_a_corrupt_frame_refused_and_the_node_going_on(1000, false, 7);
}

// A multi-piece payload whose CRC follows it, a byte corrupted deep in it.
TEST(EpollVan, AMembersCorruptLargeFrameIsRefusedNamingPayloadCrcAndTheNodeGoesOn) {
  expect_a_corrupt_frame_refused_and_the_node_going_on((3 << 20) + 3, true, 2'500'000);
}

// Our peer's process goes and another takes its port (a restarted server): the connection to it is
// lost, what we send meanwhile is held, and goes, in order, once its listener answers again. The
// sender names the peer by role and never fails.
TEST(EpollVan, MessagesToALostPeerAreHeldAndGoInOrderWhenItListensAgain) {
  LogLines log;
  realnet::LocalHost host(log.options());
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  constexpr NodeId kServer = 8;  // server 0
  auto first = std::make_unique<realnet::EpollNodeRuntime>(host, labelled("first", address));
  first->set_self(kServer);
  auto first_recorder = std::make_unique<Recorder>(*first, std::vector<std::pair<NodeId, std::string>>{},
                                                   std::vector<Message>{});
  const Recorder& first_received = *first_recorder;
  first->attach(std::move(first_recorder));
  first->start();

  realnet::EpollNodeRuntime sender(host, labelled("worker 0"));
  sender.set_self(9);
  sender.attach(std::make_unique<Recorder>(
      sender, std::vector<std::pair<NodeId, std::string>>{{kServer, address}}, std::vector<Message>{}));
  sender.start();
  std::atomic<std::uint64_t> next_key = 0;
  auto send_one = [&] {
    const std::uint64_t key = next_key++;
    ASSERT_TRUE(sender.post([&sender, key] { sender.send(numbered(kServer, key, 3000)); }));
  };
  send_one();
  auto deadline = Clock::now() + 20s;
  while (first_received.received().empty() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(first_received.received().size(), 1u);
  first.reset();  // its sockets close, as at kill -9

  // Until the loss shows: the first send after the close may still be written (the peer's kernel
  // answers it with a reset), those after it fail.
  deadline = Clock::now() + 20s;
  while (log.with("lost the connection to").empty() && Clock::now() < deadline) {
    send_one();
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_FALSE(log.with("lost the connection to").empty());
  const std::uint64_t held_from = next_key.load();
  for (int i = 0; i < 20; ++i) send_one();  // held: nothing listens

  realnet::EpollNodeRuntime second(host, labelled("second", address));
  second.set_self(kServer);
  auto second_recorder = std::make_unique<Recorder>(second, std::vector<std::pair<NodeId, std::string>>{},
                                                    std::vector<Message>{});
  const Recorder& second_received = *second_recorder;
  second.attach(std::move(second_recorder));
  second.start();
  const std::uint64_t last = next_key.load() - 1;
  deadline = Clock::now() + 20s;
  while (Clock::now() < deadline &&
         (second_received.received().empty() || second_received.received().back().header.key != last))
    std::this_thread::sleep_for(5ms);

  EXPECT_FALSE(host.failed()) << host.failure();
  const auto messages = second_received.received();
  ASSERT_FALSE(messages.empty()) << log.all();
  EXPECT_EQ(messages.back().header.key, last);
  // Every held message arrives, in order; of those sent before the loss showed, some may be lost.
  std::vector<std::uint64_t> keys;
  for (const auto& message : messages) keys.push_back(message.header.key);
  EXPECT_TRUE(std::ranges::is_sorted(keys));
  for (std::uint64_t key = held_from; key <= last; ++key)
    EXPECT_NE(std::ranges::find(keys, key), keys.end()) << "held message " << key << " was not delivered";
  const std::string lost = log.with("lost the connection to");
  EXPECT_NE(lost.find("worker 0: lost the connection to server 0 (node 8 at " + address + ")"),
            std::string::npos)
      << lost;
  EXPECT_NE(log.with("reconnected to server 0 (node 8 at " + address + ")"), "");
  sender.halt();
  second.halt();
}

// The nodes of one process on a LoopPool (realnet/loop_pool.hpp) end with the model of a loop
// thread each, in both push/pull modes.
TEST(EpollVan, NodesOnSharedLoopsEndWithTheModelOfALoopThreadEach) {
  for (const char* mode : {"separate", "fused"}) {
    const auto sc = scenario("quickstart.toml", {{"ps.push_pull", mode}});
    std::string digest[2];
    for (const bool shared : {false, true}) {
      auto options = over(realnet::Van::kEpoll);
      options.shared_loops = shared;
      const auto report = realnet::run_local(sc, options);
      ASSERT_TRUE(report.ok()) << mode << (shared ? " shared: " : " own threads: ") << problems(report);
      EXPECT_EQ(report.iterations.size(), 3u);
      EXPECT_EQ(report.violation_count, 0u);
      digest[shared] = report.model_digest;
    }
    EXPECT_FALSE(digest[0].empty());
    EXPECT_EQ(digest[1], digest[0]) << mode;
  }
}

// A protocol stand-in that only keeps timers: each firing starts the next, `count` in all.
class Ticker final : public Node {
 public:
  Ticker(Runtime& rt, int count) : rt_(rt), left_(count) {}
  void start() override { tick(); }
  void on_message(Message) override {}
  std::string describe_state() const override { return "ticking"; }
  int fired() const { return fired_.load(); }

 private:
  void tick() {
    if (left_-- == 0) return;
    rt_.start_timer(0.002, [this] {
      ++fired_;
      tick();
    });
  }
  Runtime& rt_;
  int left_;
  std::atomic<int> fired_ = 0;
};

// On one pool thread, a node whose only work is timers (no I/O ever wakes it) still runs them, and
// another node's messages arrive in order meanwhile; halting both leaves the pool free to go.
TEST(EpollVan, APoolThreadRunsTimersAndMessagesOfSeveralNodes) {
  realnet::LoopPool pool(1);
  realnet::LocalHost host({});
  auto with_pool = [&pool](std::string label) {
    auto options = labelled(std::move(label));
    options.pool = &pool;
    return options;
  };
  auto ticker_node = std::make_unique<realnet::EpollNodeRuntime>(host, with_pool("ticker"));
  auto ticker = std::make_unique<Ticker>(*ticker_node, 25);
  const Ticker& ticks = *ticker;
  ticker_node->attach(std::move(ticker));
  auto receiver = std::make_unique<realnet::EpollNodeRuntime>(host, with_pool("receiver"));
  receiver->set_self(9);
  auto recorder = std::make_unique<Recorder>(*receiver, std::vector<std::pair<NodeId, std::string>>{},
                                             std::vector<Message>{});
  const Recorder& received = *recorder;
  receiver->attach(std::move(recorder));
  std::vector<Message> to_send;
  for (int i = 0; i < 50; ++i) to_send.push_back(numbered(9, static_cast<std::uint64_t>(i), 20000));
  auto sender = std::make_unique<realnet::EpollNodeRuntime>(host, with_pool("sender"));
  sender->attach(std::make_unique<Recorder>(
      *sender, std::vector<std::pair<NodeId, std::string>>{{9, receiver->local_address()}},
      std::move(to_send)));
  ticker_node->start();
  receiver->start();
  sender->start();
  const auto deadline = Clock::now() + 20s;
  while ((received.received().size() < 50 || ticks.fired() < 25) && Clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(ticks.fired(), 25);
  const auto got = received.received();
  ASSERT_EQ(got.size(), 50u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].header.key, i);
    const auto bytes = got[i].payload.bytes();
    ASSERT_EQ(bytes.size(), 20000u);
    EXPECT_EQ(bytes[123], static_cast<std::byte>((i + 123) & 0xFF));
  }
  sender->halt();
  receiver->halt();
  ticker_node->halt();
  EXPECT_FALSE(host.failed()) << host.failure();
}

// A listener whose accept queue is full drops new SYNs, as a host that is down never answers: a
// connect bounded by a timeout gives up after it, counted as refused (tried again later), instead of
// holding the node's loop for the kernel's SYN retries.
TEST(EpollVan, AConnectThatGetsNoAnswerGivesUpAtItsTimeout) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = loopback(0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(::listen(listener, 0), 0);  // never accepted: the queue fills at once
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    fillers.push_back(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
    ::connect(fillers.back(), reinterpret_cast<sockaddr*>(&address), length);
  }
  std::this_thread::sleep_for(50ms);  // the handshakes the queue takes are done
  realnet::EpollTransport::Options options;
  options.own_threads = false;
  realnet::EpollTransport transport(1, options, {});
  bool refused = false;
  const auto start = Clock::now();
  const auto error = transport.connect(8, "127.0.0.1", ntohs(address.sin_port), &refused, 100);
  const double took_s = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("no answer within 100 ms"), std::string::npos) << *error;
  EXPECT_TRUE(refused);
  EXPECT_LT(took_s, 5.0);  // the kernel's SYN retries would take minutes
  for (const int fd : fillers) ::close(fd);
  ::close(listener);
}

// Two chains of executor tasks on a pooled node with no timer at all: every task's `done` is posted
// from its lane's thread and must wake the node by itself. A post that found the node's wake flag
// still set by an earlier post (whose wake-up the turn had already consumed) used to be left in the
// queue until the node's next timer; here there is none, so one such post would stop its chain.
class LaneChains final : public Node {
 public:
  LaneChains(Runtime& rt, int steps) : rt_(rt), steps_(steps) {}
  void start() override {
    for (int lane = 0; lane < 2; ++lane) step(lane);
  }
  void on_message(Message) override {}
  std::string describe_state() const override { return "chains"; }
  int done() const { return done_.load(); }

 private:
  void step(int lane) {
    if (left_[lane]-- == 0) return;
    // 20 us: above NodeRuntimeOptions::inline_task_below_s, so the task runs on its lane's thread.
    const ComputeCost cost{.seconds = 20e-6};
    rt_.executor("engine", 2)
        .submit(
            lane, "step", cost, [] {},
            [this, lane] {
              ++done_;
              step(lane);
            });
  }
  Runtime& rt_;
  int steps_;
  int left_[2] = {steps_, steps_};
  std::atomic<int> done_ = 0;
};

TEST(EpollVan, EveryLanePostWakesAPooledNodeThatHasNoTimer) {
  constexpr int kSteps = 5000;
  realnet::LoopPool pool(1);
  realnet::LocalHost host({});
  auto options = labelled("chains");
  options.pool = &pool;
  realnet::EpollNodeRuntime node(host, options);
  auto chains = std::make_unique<LaneChains>(node, kSteps);
  const LaneChains& progress = *chains;
  node.attach(std::move(chains));
  node.start();
  const auto deadline = Clock::now() + 60s;
  while (progress.done() < 2 * kSteps && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(progress.done(), 2 * kSteps);
  node.halt();
  EXPECT_FALSE(host.failed()) << host.failure();
}

}  // namespace
}  // namespace pstwin
