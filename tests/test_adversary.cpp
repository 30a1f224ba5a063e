// A scripted adversary against real node runtimes on 127.0.0.1, for both vans: a process without the
// job's token tries to register (before and after the real nodes did), sends random, truncated and
// oversized bytes and 4 GiB claims, holds thousands of idle connections and proves membership a byte
// at a time; without a token (unauthenticated runs) it sends malformed frames and messages claiming
// another node's id; against an encrypted job (ZeroMQ CURVE) it connects without the job's keys.
// Every job must still end with 0 violations and the simulator's model, the outsider must learn
// nothing, and each attacked node must count what it refused.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zmq.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/codec.hpp"
#include "ps/control.hpp"
#include "ps/ids.hpp"
#include "realnet/job_auth.hpp"
#include "realnet/local_run.hpp"
#include "realnet/zmq_runtime.hpp"
#include "scenario/scenario.hpp"
#include "sim/simulation.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using namespace std::chrono_literals;
using realnet::Van;

// Long enough (about 8 s of modelled compute) that every attack below lands while the job runs: the
// slowest waits out the 5 s membership deadline.
Scenario long_quickstart() {
  return load_scenario(
      PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml",
      {{"workload.iterations", "160"}, {"workload.compute", "50ms"}, {"output.trace", "false"}});
}

std::string failure_text(const RunReport& report) {
  std::string out = report.failure;
  for (const auto& v : report.violations) out += "\n" + v.invariant + ": " + v.detail;
  return out;
}

using testing::refusals_text;
using testing::refused_from;

// ---- raw TCP

class Socket {
 public:
  explicit Socket(const std::string& address) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0;
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)), connected_(other.connected_) {}
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  bool connected() const { return connected_; }
  void write(const std::string& bytes) const {
    [[maybe_unused]] const auto n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }
  // Up to `count` bytes, waiting at most `timeout` for each piece; fewer if the peer closed.
  std::string read(std::size_t count, std::chrono::milliseconds timeout = 2000ms) const {
    std::string out;
    while (out.size() < count) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) break;
      char buffer[4096];
      const auto n = ::recv(fd_, buffer, std::min(sizeof buffer, count - out.size()), 0);
      if (n <= 0) break;
      out.append(buffer, static_cast<std::size_t>(n));
    }
    return out;
  }
  // Whether the node closed the connection (EOF or reset within `timeout`); what it sent before
  // (a challenge) is read and dropped.
  bool closed_by_peer(std::chrono::milliseconds timeout = 2000ms) const {
    if (fd_ < 0) return false;  // never opened: nothing to wait for
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
      char buffer[256];
      if (::recv(fd_, buffer, sizeof buffer, MSG_DONTWAIT) <= 0) return true;
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

// A listener the outsider advertises in its registration: a node table would come to it.
class Listener {
 public:
  Listener() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) {
    sockaddr_in at{};
    at.sin_family = AF_INET;
    at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof at;
    ::bind(fd_, reinterpret_cast<const sockaddr*>(&at), length);
    ::listen(fd_, 16);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&at), &length);
    address_ = "127.0.0.1:" + std::to_string(ntohs(at.sin_port));
  }
  ~Listener() { ::close(fd_); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  const std::string& address() const { return address_; }
  bool anyone_connected() const {
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  }

 private:
  int fd_;
  std::string address_;
};

std::string frame_bytes(const Message& message) {
  return encode_frame(message);
}

Message message_of(Command command, NodeId sender, NodeId recipient, std::string body = {}) {
  Message m;
  m.header.command = command;
  m.header.sender = sender;
  m.header.recipient = recipient;
  m.payload = Payload::copy_of(std::as_bytes(std::span(body)));
  return m;
}

// The registration of an outsider that wants to be worker 1 and hear the node table at `address`.
Message registration(const Scenario& sc, const std::string& address) {
  Message m = message_of(Command::kRegister, kNoNode, kSchedulerId);
  m.payload = encode_registration({NodeInfo{kNoNode, Role::kWorker, 1, address, "h"}, job_digest(sc)});
  return m;
}

// A header that announces `bytes` of payload, without them (a phantom frame: the length is checked
// against the limit before anything else).
std::string header_claiming(std::uint64_t bytes, NodeId sender, NodeId recipient) {
  const Message m = message_of(Command::kPush, sender, recipient);
  const HeaderBytes header = encode_header(m.header, Payload::phantom(bytes), false);
  return {reinterpret_cast<const char*>(header.data()), header.size()};
}

std::string random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 random(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(random() & 0xFF);
  return out;
}

// As many idle connections as the descriptor limit allows, up to 2000 (the soft limit is raised to
// the hard one first).
std::size_t idle_connection_budget() {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
  ::getrlimit(RLIMIT_NOFILE, &limit);
  // The nodes run in this process: each idle connection costs two descriptors (ours and the node's),
  // and the server gets a quarter as many as the scheduler besides, so 2.5 per connection asked for
  // (3, to keep a margin); 400 stay for the job. A descriptor short, a socket would not open and the
  // attack would test nothing.
  const auto spare = limit.rlim_cur > 400 ? (limit.rlim_cur - 400) / 3 : 0;
  return std::min<std::size_t>(2000, spare);
}

using testing::address_of;

std::string simulated_digest(const Scenario& sc) {
  const auto simulated = sim::run_isolated({sc}, 1);  // forks: before any thread of this test
  EXPECT_EQ(simulated.size(), 1u);
  EXPECT_TRUE(simulated[0].ok()) << failure_text(simulated[0]);
  return simulated[0].model_digest;
}

class Adversary : public ::testing::TestWithParam<Van> {};

// The epoll van's outsider speaks TCP: it reads the challenge and answers it wrongly or not at all.
void attack_epoll_with_token(const Scenario& sc, const std::string& address, const Listener& listener,
                             std::size_t idle) {
  {  // registration without a proof: its bytes are read as the proof, which is wrong
    Socket s(address);
    ASSERT_TRUE(s.connected());
    EXPECT_EQ(s.read(realnet::kHandshakeBytes).size(), realnet::kHandshakeBytes);
    s.write(frame_bytes(registration(sc, listener.address())));
    EXPECT_TRUE(s.closed_by_peer());
  }
  {  // a proof under another token
    Socket s(address);
    const std::string challenge = s.read(realnet::kHandshakeBytes);
    ASSERT_EQ(challenge.size(), realnet::kHandshakeBytes);
    const auto proof =
        realnet::JobKey("not this job's token at all").prove(std::as_bytes(std::span(challenge)));
    ASSERT_TRUE(proof.has_value());
    s.write(std::string(reinterpret_cast<const char*>(proof->data()), proof->size()) +
            frame_bytes(registration(sc, listener.address())));
    EXPECT_TRUE(s.closed_by_peer());
  }
  for (std::uint32_t seed = 1; seed <= 3; ++seed) {  // random bytes
    Socket s(address);
    s.write(random_bytes(4096, seed));
    EXPECT_TRUE(s.closed_by_peer());
  }
  {  // a 4 GiB claim and a truncated header
    Socket claim(address);
    claim.write(header_claiming(std::uint64_t{4} << 30, worker_id(0), server_id(0)));
    EXPECT_TRUE(claim.closed_by_peer());
    Socket truncated(address);
    truncated.write(std::string(20, 'x'));
  }
  // Idle connections and a slowloris that sends its (wrong) proof a byte every 200 ms: closed at
  // the handshake deadline, or at once past the cap of those proving membership.
  std::vector<Socket> idle_ones;
  for (std::size_t i = 0; i < idle; ++i) idle_ones.emplace_back(address);
  EXPECT_EQ(std::ranges::count_if(idle_ones, &Socket::connected), static_cast<std::ptrdiff_t>(idle))
      << "idle connections that could not be opened";
  // The deadline runs from the node's accept, which a loaded machine delays: the margins are wide,
  // and every wait below has one overall bound, so a node that never closes fails in seconds.
  Socket slow(address);
  ASSERT_TRUE(slow.connected()) << "the slowloris could not connect";
  for (int i = 0; i < 30 && !slow.closed_by_peer(200ms); ++i) slow.write("p");
  EXPECT_TRUE(slow.closed_by_peer(10s)) << "the slowloris was not closed at the handshake deadline";
  const auto until = std::chrono::steady_clock::now() + 15s;
  std::size_t closed = 0;
  for (const auto& s : idle_ones) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    closed += s.closed_by_peer(std::max(left, 0ms)) ? 1 : 0;
  }
  EXPECT_EQ(closed, idle) << "idle connections still open past the handshake deadline";
}

// The ZeroMQ van's outsider speaks ZMTP: messages without the handshake, a wrong proof, a challenge
// left unanswered.
void attack_zmq_with_token(const Scenario& sc, const std::string& address, std::size_t idle) {
  const auto registration_frames = [&] {
    const Message m = registration(sc, "127.0.0.1:9");
    const auto header = encode_header(m.header, m.payload, true);
    const auto body = m.payload.bytes();
    return std::vector<std::string>{std::string(reinterpret_cast<const char*>(header.data()), header.size()),
                                    std::string(reinterpret_cast<const char*>(body.data()), body.size())};
  }();
  {  // registration without the handshake: refused, and nothing comes back
    realnet::RawDealer outsider(address);
    outsider.send(registration_frames);
    EXPECT_FALSE(outsider.receive(300).has_value()) << "the outsider got an answer";
  }
  {  // a wrong proof, then the registration: no node table comes back
    realnet::RawDealer outsider(address);
    const auto hello = realnet::hello_bytes();
    outsider.send({std::string(reinterpret_cast<const char*>(hello.data()), hello.size())});
    const auto challenge = outsider.receive(2000);
    ASSERT_TRUE(challenge.has_value());
    EXPECT_EQ(challenge->size(), realnet::kHandshakeBytes);
    const auto proof =
        realnet::JobKey("not this job's token at all").prove(std::as_bytes(std::span(*challenge)));
    ASSERT_TRUE(proof.has_value());
    outsider.send({std::string(reinterpret_cast<const char*>(proof->data()), proof->size())});
    outsider.send(registration_frames);
    EXPECT_FALSE(outsider.receive(300).has_value()) << "the outsider got an answer";
  }
  for (std::uint32_t seed = 1; seed <= 3; ++seed) realnet::send_raw(address, {random_bytes(4096, seed)});
  realnet::send_raw(address, {header_claiming(std::uint64_t{4} << 30, worker_id(0), server_id(0))});
  realnet::send_raw(address, {std::string(20, 'x')});
  // An unanswered challenge: refused at the handshake deadline.
  realnet::RawDealer unanswered(address);
  const auto hello = realnet::hello_bytes();
  unanswered.send({std::string(reinterpret_cast<const char*>(hello.data()), hello.size())});
  EXPECT_TRUE(unanswered.receive(2000).has_value());
  // Idle TCP connections that never speak ZMTP (ZeroMQ drops them at its handshake interval).
  std::vector<Socket> idle_ones;
  for (std::size_t i = 0; i < idle; ++i) idle_ones.emplace_back(address);
  std::this_thread::sleep_for(6s);  // past the membership deadline
}

TEST_P(Adversary, OutsiderWithoutTheTokenIsRefusedAndTheJobEndsWithTheSimulatorsModel) {
  const Scenario sc = long_quickstart();
  const std::string expected_digest = simulated_digest(sc);
  const std::size_t idle = idle_connection_budget();
  const Listener listener;
  realnet::LocalRunOptions options;
  options.van = GetParam();
  options.log = [](std::string_view) {};
  options.on_started = [&](const std::vector<std::pair<std::string, std::string>>& nodes) {
    const std::string scheduler = address_of(nodes, "scheduler");
    const std::string server = address_of(nodes, "server 0");
    // Both at once: each waits out the membership deadline.
    std::vector<std::jthread> attackers;
    for (const auto& target : {std::pair{scheduler, idle}, std::pair{server, idle / 4}})
      attackers.emplace_back([&, target] {
        if (GetParam() == Van::kEpoll)
          attack_epoll_with_token(sc, target.first, listener, target.second);
        else
          attack_zmq_with_token(sc, target.first, target.second);
      });
  };
  const auto report = realnet::run_local(sc, options);
  EXPECT_TRUE(report.completed) << failure_text(report);
  EXPECT_EQ(report.violation_count, 0u) << failure_text(report);
  EXPECT_EQ(report.model_digest, expected_digest);
  EXPECT_FALSE(listener.anyone_connected()) << "the outsider was sent the node table";
  // Registration (2), random bytes (3), the 4 GiB claim, the slowloris or unanswered challenge.
  EXPECT_GE(refused_from(report, "scheduler", "127.0.0.1"), 7u) << refusals_text(report);
  EXPECT_GE(refused_from(report, "server 0", "127.0.0.1"), 7u) << refusals_text(report);
  for (const auto& [node, peers] : report.refused)
    for (const auto& [peer, count] : peers)
      EXPECT_EQ(peer, "127.0.0.1") << node << " refused a member's message: " << refusals_text(report);
}

// Without a token the first well-formed header makes a member; everything before it is refused and
// its connection closed, a member's message that names another node is dropped alone, and the
// scheduler ignores a worker_done from a node that is not one of its workers.
TEST_P(Adversary, UnauthenticatedNodesRefuseMalformedOversizedAndForgedFrames) {
  Scenario sc = long_quickstart();
  sc.workload.iterations = 20;
  const std::string expected_digest = simulated_digest(sc);
  realnet::LocalRunOptions options;
  options.van = GetParam();
  options.job_token = "";
  options.log = [](std::string_view) {};
  options.on_started = [&](const std::vector<std::pair<std::string, std::string>>& nodes) {
    const std::string server = address_of(nodes, "server 0");
    const NodeId self = server_id(0);
    // Binds the connection to worker 1 (a heartbeat answer: nothing a server acts on), then claims
    // worker 0, the scheduler and server 1.
    const Message bind = [&] {
      Message m = message_of(Command::kHeartbeat, worker_id(1), self);
      m.header.is_response = true;
      return m;
    }();
    // To the scheduler, one connection each as the two servers and two ranks the job does not have:
    // a worker_done, which only a worker of the node table may send. Four of them would end the job
    // before any worker finished.
    const std::string scheduler = address_of(nodes, "scheduler");
    std::vector<std::vector<Message>> fake_dones;
    for (const NodeId id : {server_id(0), server_id(1), worker_id(50), worker_id(51)}) {
      Message hello = message_of(Command::kHeartbeat, id, kSchedulerId);
      hello.header.is_response = true;
      fake_dones.push_back({hello, message_of(Command::kWorkerDone, id, kSchedulerId)});
    }
    std::vector<Message> forged{message_of(Command::kPush, worker_id(0), self, std::string(64, 'f')),
                                message_of(Command::kShutdown, kSchedulerId, self),
                                message_of(Command::kPush, server_id(1), self, std::string(64, 'f'))};
    if (GetParam() == Van::kEpoll) {
      for (std::uint32_t seed = 1; seed <= 3; ++seed) {
        Socket s(server);
        s.write(random_bytes(4096, seed));
        EXPECT_TRUE(s.closed_by_peer());
      }
      for (const std::uint64_t claim : {std::uint64_t{4} << 30, std::uint64_t{2} << 20}) {
        Socket s(server);
        s.write(header_claiming(claim, worker_id(1), self));
        EXPECT_TRUE(s.closed_by_peer());
      }
      Socket member(server);
      std::string bytes = frame_bytes(bind);
      for (const auto& m : forged) bytes += frame_bytes(m);
      member.write(bytes);
      EXPECT_FALSE(member.closed_by_peer(300ms)) << "a member's connection was closed for a forged message";
      std::vector<Socket> to_scheduler;
      for (const auto& messages : fake_dones) {
        to_scheduler.emplace_back(scheduler);
        to_scheduler.back().write(frame_bytes(messages[0]) + frame_bytes(messages[1]));
      }
    } else {
      for (std::uint32_t seed = 1; seed <= 3; ++seed) realnet::send_raw(server, {random_bytes(4096, seed)});
      for (const std::uint64_t claim : {std::uint64_t{4} << 30, std::uint64_t{2} << 20})
        realnet::send_raw(server, {header_claiming(claim, worker_id(1), self), std::string(16, 'x')});
      const auto send_all = [](realnet::RawDealer& dealer, const std::vector<Message>& messages) {
        for (const auto& m : messages) {
          const auto header = encode_header(m.header, m.payload, true);
          const auto body = m.payload.bytes();
          std::vector<std::string> frames{
              std::string(reinterpret_cast<const char*>(header.data()), header.size())};
          if (!body.empty()) frames.emplace_back(reinterpret_cast<const char*>(body.data()), body.size());
          dealer.send(frames);
        }
      };
      realnet::RawDealer member(server);
      send_all(member, {bind, forged[0], forged[1], forged[2]});
      std::vector<std::unique_ptr<realnet::RawDealer>> to_scheduler;
      for (const auto& messages : fake_dones) {
        to_scheduler.push_back(std::make_unique<realnet::RawDealer>(scheduler));
        send_all(*to_scheduler.back(), messages);
      }
      std::this_thread::sleep_for(300ms);
    }
  };
  const auto report = realnet::run_local(sc, options);
  EXPECT_TRUE(report.completed) << failure_text(report);
  EXPECT_EQ(report.violation_count, 0u) << failure_text(report);
  EXPECT_EQ(report.model_digest, expected_digest);
  // Random bytes (3) and the two oversized claims from outsiders; three forgeries from node 11.
  EXPECT_EQ(refused_from(report, "server 0", "127.0.0.1"), 5u) << refusals_text(report);
  EXPECT_EQ(refused_from(report, "server 0", "node " + std::to_string(worker_id(1))), 3u)
      << refusals_text(report);
}

INSTANTIATE_TEST_SUITE_P(BothVans, Adversary, ::testing::Values(Van::kZmq, Van::kEpoll),
                         [](const auto& van) { return std::string(realnet::van_name(van.param)); });

// PSTWIN_ENCRYPT=curve: a peer that cannot complete the CURVE handshake (a plain DEALER, or one with
// another job's keys) never reaches the membership proof: its hello gets no challenge, its bytes reach
// no node. A DEALER with this job's keys does get one, so the silence is the keys' doing. The job ends
// with the simulator's model.
TEST(Encryption, PeerWithoutTheJobsKeysGetsNothingAndTheJobEndsWithTheSimulatorsModel) {
  const Scenario sc = long_quickstart();
  const std::string expected_digest = simulated_digest(sc);
  const std::string token = "the token of this encrypted job, 32+";
  realnet::LocalRunOptions options;
  options.van = Van::kZmq;
  options.job_token = token;
  options.encrypt = true;
  options.log = [](std::string_view) {};
  const auto hello = realnet::hello_bytes();
  const std::string hello_frame(reinterpret_cast<const char*>(hello.data()), hello.size());
  std::vector<std::string> answered;  // "<node> <who>" for each dealer that was sent a challenge
  options.on_started = [&](const std::vector<std::pair<std::string, std::string>>& nodes) {
    for (const std::string node : {"scheduler", "server 0"}) {
      const std::string address = address_of(nodes, node);
      const std::vector<std::pair<std::string, std::optional<realnet::CurveKeyPair>>> dealers{
          {"plain", std::nullopt},
          {"another job's keys", realnet::JobKey("another job's token, 32 chars...").curve_keys()},
          {"this job's keys", realnet::JobKey(token).curve_keys()}};
      for (const auto& [who, keys] : dealers) {
        realnet::RawDealer dealer(address, keys);
        dealer.send({hello_frame});
        if (dealer.receive(1500).has_value()) answered.push_back(node + " " + who);
      }
      for (std::uint32_t seed = 1; seed <= 2; ++seed) realnet::send_raw(address, {random_bytes(4096, seed)});
    }
  };
  const auto report = realnet::run_local(sc, options);
  EXPECT_TRUE(report.completed) << failure_text(report);
  EXPECT_EQ(report.violation_count, 0u) << failure_text(report);
  EXPECT_EQ(report.model_digest, expected_digest);
  EXPECT_EQ(answered, (std::vector<std::string>{"scheduler this job's keys", "server 0 this job's keys"}));
}

// The CURVE key pair depends on the token alone: every member derives the same, another token
// another; its public half is the secret's, as ZeroMQ computes it.
TEST(JobKey, CurveKeysComeFromTheTokenAlone) {
  const auto keys = realnet::JobKey("a token of this job, 32 chars...").curve_keys();
  const auto again = realnet::JobKey("a token of this job, 32 chars...").curve_keys();
  const auto other = realnet::JobKey("another job's token, 32 chars...").curve_keys();
  EXPECT_EQ(keys.public_key, again.public_key);
  EXPECT_EQ(keys.secret_key, again.secret_key);
  EXPECT_NE(keys.public_key, other.public_key);
  EXPECT_NE(keys.secret_key, other.secret_key);
  EXPECT_NE(keys.public_key, keys.secret_key);
  std::array<char, 41> secret_z85{}, public_z85{}, expected_z85{};
  ASSERT_NE(zmq_z85_encode(secret_z85.data(), keys.secret_key.data(), keys.secret_key.size()), nullptr);
  ASSERT_EQ(zmq_curve_public(public_z85.data(), secret_z85.data()), 0);
  ASSERT_NE(zmq_z85_encode(expected_z85.data(), keys.public_key.data(), keys.public_key.size()), nullptr);
  EXPECT_STREQ(public_z85.data(), expected_z85.data());
}

TEST(JobKey, ProofAnswersOnlyItsChallengeUnderTheSameToken) {
  const realnet::JobKey key("a token of this job, 32 chars...");
  const auto challenge = realnet::JobKey::challenge();
  const auto other = realnet::JobKey::challenge();
  EXPECT_NE(challenge, other);  // fresh random bytes each time
  const auto proof = key.prove(challenge);
  ASSERT_TRUE(proof.has_value());
  EXPECT_TRUE(key.verify(challenge, *proof));
  EXPECT_TRUE(realnet::JobKey("a token of this job, 32 chars...").verify(challenge, *proof));
  EXPECT_FALSE(key.verify(other, *proof));
  EXPECT_FALSE(realnet::JobKey("another job's token, 32 chars...").verify(challenge, *proof));
  auto flipped = *proof;
  flipped[20] ^= std::byte{1};
  EXPECT_FALSE(key.verify(challenge, flipped));
  EXPECT_FALSE(key.verify(challenge, challenge));   // a challenge is no proof
  EXPECT_FALSE(key.prove(realnet::hello_bytes()));  // a hello is no challenge
  EXPECT_FALSE(key.prove(std::span(challenge).first(39)));
  EXPECT_TRUE(realnet::is_hello(realnet::hello_bytes()));
  const auto token = realnet::JobKey::random_token();
  EXPECT_EQ(token.size(), 64u);
  EXPECT_NE(token, realnet::JobKey::random_token());
}

}  // namespace
}  // namespace pstwin
