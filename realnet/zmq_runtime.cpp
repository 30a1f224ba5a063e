#include "realnet/zmq_runtime.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <iostream>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/codec.hpp"
#include "core/send_order.hpp"
#include "fpt/message_pacer.hpp"
#include "ps/ids.hpp"
#include "realnet/event_fd.hpp"
#include "realnet/job_auth.hpp"

namespace pstwin::realnet {

namespace {

// Membership handshakes (with a job token): at most this many connections may be proving it at
// once, each for at most this long; the rest are refused.
constexpr std::size_t kMaxUnproven = 256;
constexpr double kHandshakeTimeoutS = 5;
// What CURVE adds around each frame on the wire (CurveZMQ's MESSAGE command): the command name and
// nonce (16 bytes), a flags byte and the box's MAC (16 bytes).
constexpr std::int64_t kCurveFrameOverhead = 33;

// A CURVE key as ZeroMQ's socket options take it: 32 bytes, binary.
zmq::const_buffer key_buffer(const std::array<unsigned char, CurveKeyPair::kBytes>& key) {
  return zmq::buffer(key.data(), key.size());
}

// Before connecting: the socket presents `keys` and expects the server to hold them too (every
// member of an encrypted job holds the same pair).
void make_curve_client(zmq::socket_t& socket, const CurveKeyPair& keys) {
  socket.set(zmq::sockopt::curve_serverkey, key_buffer(keys.public_key));
  socket.set(zmq::sockopt::curve_publickey, key_buffer(keys.public_key));
  socket.set(zmq::sockopt::curve_secretkey, key_buffer(keys.secret_key));
}

std::span<const std::byte> bytes_of(const zmq::message_t& frame) {
  return {frame.data<std::byte>(), frame.size()};
}

// The host a frame came from ("127.0.0.1"), as ZeroMQ reports the connection's peer.
std::string peer_host(zmq::message_t& frame) {
  try {
    return frame.gets("Peer-Address");
  } catch (const zmq::error_t&) {
    return "unknown host";
  }
}

// A frame that sends `payload`'s bytes without copying them: ZeroMQ's I/O thread reads them in
// place and the frame keeps the payload's buffer alive until it is done with them.
zmq::message_t zero_copy_frame(Payload payload) {
  auto owner = std::make_unique<Payload>(std::move(payload));
  const auto bytes = owner->bytes();
  zmq::message_t frame(
      const_cast<std::byte*>(bytes.data()), bytes.size(),
      [](void*, void* hint) { std::unique_ptr<Payload>(static_cast<Payload*>(hint)); }, owner.get());
  static_cast<void>(owner.release());  // the frame's free function owns it now
  return frame;
}

// A payload that owns a received frame: its bytes stay where ZeroMQ received them and are freed when
// the last Payload sharing them goes. A frame whose data is not float-aligned (ZeroMQ may receive
// a small message inside a shared batch buffer) is copied instead, so floats() stays well defined.
Payload adopt_frame(zmq::message_t frame, std::uint64_t& copied_bytes) {
  const auto size = frame.size();
  if (size == 0) return Payload{};
  // The data pointer is taken after the move: a very small message keeps its bytes inside the
  // zmq_msg_t itself, so they move with it.
  auto owner = std::make_shared<zmq::message_t>(std::move(frame));
  auto* data = owner->data<std::byte>();
  if (reinterpret_cast<std::uintptr_t>(data) % alignof(float) != 0) {
    copied_bytes += size;
    return Payload::copy_of(std::span<const std::byte>(data, size));
  }
  return Payload::adopt(std::make_shared<ByteBuffer>(data, size, [owner] {}));
}

}  // namespace

// ---------------------------------------------------------------- ZmqNodeRuntime::Sockets

// Every ZeroMQ socket of the node: a ROUTER that receives from every peer and one DEALER per peer
// address. Bound by the constructor's thread, then used only by the event loop (ZeroMQ sockets may
// move between threads, never be shared), closed once the loop has ended.
class ZmqNodeRuntime::Sockets {
 public:
  explicit Sockets(ZmqNodeRuntime& owner) : owner_(owner), pacer_(owner.own_pacing_rate("ZeroMQ")) {
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::rcvhwm, 0);  // never drop or block: the protocol bounds its own traffic
    if (owner.options_.max_payload_bytes > 0) limits_.max_payload_bytes = owner.options_.max_payload_bytes;
    if (!owner.options_.job_token.empty()) key_.emplace(owner.options_.job_token);
    if (owner.options_.encrypt) {
      if (!key_) throw std::invalid_argument("ZeroMQ CURVE encryption needs a job token");
      if (zmq_has("curve") == 0)
        throw std::runtime_error(
            "PSTWIN_ENCRYPT=curve: this libzmq was built without CURVE (libsodium): install a libzmq "
            "with it (Debian's libzmq5 has it) or leave encryption off");
      curve_.emplace(key_->curve_keys());
      // Every member holds the job's key pair: the ROUTER serves with it, and a peer that cannot
      // complete the CURVE handshake (no keys, another job's) never reaches the membership proof.
      router_.set(zmq::sockopt::curve_server, true);
      router_.set(zmq::sockopt::curve_secretkey, key_buffer(curve_->secret_key));
    }
    // ZeroMQ refuses a larger frame as it reads its length and drops that connection. With CURVE it
    // reads the length of the sealed frame, which is larger.
    router_.set(zmq::sockopt::maxmsgsize,
                static_cast<std::int64_t>(limits_.max_payload_bytes) + (curve_ ? kCurveFrameOverhead : 0));
    try {
      router_.bind("tcp://" + owner_.options_.bind);
    } catch (const zmq::error_t& e) {
      throw BindError("cannot bind " + owner_.options_.bind + ": " + e.what());
    }
    std::string endpoint = router_.get(zmq::sockopt::last_endpoint);
    constexpr std::string_view kScheme = "tcp://";
    if (endpoint.starts_with(kScheme)) endpoint.erase(0, kScheme.size());
    address_ = endpoint;
    router_fd_ = router_.get(zmq::sockopt::fd);
  }
  Sockets(const Sockets&) = delete;
  Sockets& operator=(const Sockets&) = delete;

  const std::string& address() const { return address_; }
  const EventFd& wake() const { return wake_; }

  // The receiver's ROUTER names each connection itself (a fresh routing id per connection, never
  // reused), so what a connection proved stays with that connection.
  void connect(NodeId id, const std::string& address) {
    auto it = dealers_.find(address);
    if (it == dealers_.end()) {
      Dealer dealer{
          zmq::socket_t(context_, zmq::socket_type::dealer), !key_.has_value(), -1, std::nullopt, -1, false};
      dealer.socket.set(zmq::sockopt::linger, std::max(owner_.options_.linger_ms, 0));
      dealer.socket.set(zmq::sockopt::sndhwm, 0);
      if (curve_) make_curve_client(dealer.socket, *curve_);
      dealer.socket.connect("tcp://" + address);
      if (key_) {
        // ZeroMQ reconnects a dropped connection by itself, and the peer's ROUTER sees a new connection
        // that has proven nothing: a monitor tells the loop, which proves membership again.
        const std::string monitor = "inproc://pstwin-dealer-" + std::to_string(dealers_.size());
        if (zmq_socket_monitor(dealer.socket.handle(), monitor.c_str(), ZMQ_EVENT_DISCONNECTED) != 0)
          throw std::runtime_error("zmq_socket_monitor: " + std::string(zmq_strerror(zmq_errno())));
        dealer.monitor.emplace(context_, zmq::socket_type::pair);
        dealer.monitor->connect(monitor);
        dealer.monitor_fd = dealer.monitor->get(zmq::sockopt::fd);
        dealer.fd = dealer.socket.get(zmq::sockopt::fd);
        ask_challenge(dealer.socket);
        ++unproven_dealers_;
      }
      it = dealers_.emplace(address, std::move(dealer)).first;
      if (key_) check_monitors_ = true;
    }
    routes_[id] = &it->second;
  }

  // Queued per peer in the simulator's stream order; what one loop round queued leaves in flush().
  void queue(Message message) {
    auto key = send_order_key(message);
    outgoing_[message.header.recipient].emplace(key, std::move(message));
  }

  // A paced peer (lighter than the heaviest in the load balancer's table, PSTWIN_NIC_RATE set) gets
  // one data message, then none until it has had time to leave at the peer's share; its control
  // messages still go. ZeroMQ's I/O thread writes what it is handed at once, so this is the only
  // place that can hold a connection to its share (there is no socket to give SO_MAX_PACING_RATE).
  void flush() {
    const double now = pacer_.active() ? owner_.now() : 0;
    // One CRC for a payload that goes to several peers in this flush (the server's aggregate to
    // every worker: a 16 MB read from memory per worker otherwise). `checked` holds the payload, so
    // its buffer can neither go nor be reused while the pointer stands for it.
    CrcMemo checked;
    for (auto& [to, queue] : outgoing_) {
      if (queue.empty()) continue;
      auto route = routes_.find(to);
      if (route == routes_.end()) {
        owner_.log("dropped " + std::to_string(queue.size()) + " message(s) to node " + std::to_string(to) +
                   ": no socket for it");
        queue.clear();
        continue;
      }
      if (!route->second->proven) continue;  // held until the peer's challenge is answered
      for (auto it = queue.begin(); it != queue.end();) {
        const bool data = !it->second.payload.is_phantom() && !it->second.payload.empty();
        if (data && pacer_.active() && pacer_.held(to, now)) {
          ++it;
          continue;
        }
        const std::uint64_t wire_bytes = transmit(route->second->socket, std::move(it->second), checked);
        if (data && pacer_.active()) pacer_.sent(to, wire_bytes, now);
        it = queue.erase(it);
      }
    }
  }

  void set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) {
    if (auto error = pacer_.set_weights(version, weights)) owner_.log("send weights refused: " + *error);
  }

  // Hands every complete message waiting on the ROUTER to the protocol, until the node halts.
  void receive_all() {
    if (check_monitors_) reprove_reconnected();
    if (unproven_dealers_ > 0) answer_challenges();
    if (key_) expire_unproven();
    if (!router_ready_) return;  // nothing new since the last failed recv
    router_ready_ = false;
    while (!owner_.halting()) {
      const Seconds start = owner_.now();
      std::vector<zmq::message_t> parts;
      const auto received =
          zmq::recv_multipart(router_, std::back_inserter(parts), zmq::recv_flags::dontwait);
      if (!received) return;
      handle(parts, start);
    }
  }

  // Sleeps until a message arrives, the eventfd is signalled, or `timeout_ms` passes (-1: no limit).
  // A plain poll(2) on the ROUTER's ZMQ_FD and the eventfd: zmq_poll would add two ZMQ_EVENTS
  // checks (a getpid and a poll each) per wait. ZMQ_FD only signals new commands to the socket, so
  // this is right because receive_all() ends every visit with a failed recv, which processes every
  // pending command: a message arriving after it raises the FD again.
  // A held peer's release cuts the wait short, to the microsecond (ppoll): a millisecond's rounding
  // would hold a 4 KB message at a 25 Mb/s share (1.3 ms) for 2 ms.
  void wait(long timeout_ms) {
    std::vector<pollfd> fds{pollfd{router_fd_, POLLIN, 0}, pollfd{wake_.fd(), POLLIN, 0}};
    // DEALERs waiting for their challenge (answer_challenges() ended each visit with a failed recv);
    // they and the handshake deadlines are looked at again at least every kHandshakeCheckS.
    constexpr double kHandshakeCheckS = 0.1;
    const std::size_t first_monitor = fds.size();
    for (const auto& [address, dealer] : dealers_)
      if (dealer.monitor_fd >= 0) fds.push_back(pollfd{dealer.monitor_fd, POLLIN, 0});
    const std::size_t monitors = fds.size() - first_monitor;
    for (const auto& [address, dealer] : dealers_)
      if (!dealer.proven) fds.push_back(pollfd{dealer.fd, POLLIN, 0});
    double wait_s = timeout_ms < 0 ? -1 : static_cast<double>(std::min<long>(timeout_ms, 1 << 30)) / 1e3;
    if (unproven_dealers_ > 0 || !unproven_.empty())
      wait_s = wait_s < 0 ? kHandshakeCheckS : std::min(wait_s, kHandshakeCheckS);
    if (pacer_.active()) {
      const double now = owner_.now();
      if (const auto release = pacer_.next_release(now))
        wait_s = wait_s < 0 ? *release - now : std::min(wait_s, *release - now);
    }
    timespec limit{};
    if (wait_s >= 0) {
      const auto ns = static_cast<long long>(std::ceil(wait_s * 1e9));
      limit.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
      limit.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    }
    if (::ppoll(fds.data(), fds.size(), wait_s < 0 ? nullptr : &limit, nullptr) < 0) {
      if (errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
      router_ready_ = true;  // a signal interrupted the wait: look again
      return;
    }
    if ((fds[0].revents & POLLIN) != 0) router_ready_ = true;
    if ((fds[1].revents & POLLIN) != 0) wake_.drain();
    for (std::size_t i = first_monitor; i < first_monitor + monitors; ++i)
      if ((fds[i].revents & POLLIN) != 0) check_monitors_ = true;
  }

 private:
  struct CrcMemo {
    Payload payload;  // the last payload checksummed, kept alive
    std::uint32_t crc = 0;
  };

  // Returns the message's bytes on the wire (header and payload).
  std::uint64_t transmit(zmq::socket_t& socket, Message message, CrcMemo& checked) {
    const Seconds start = owner_.now();
    // A zero-copy view is read now, at transmission, as the simulator does.
    message.payload = message.payload.frozen();
    std::uint32_t crc = 0;
    if (!message.payload.is_phantom() && !message.payload.empty()) {
      const auto bytes = message.payload.bytes();
      const auto known = checked.payload.bytes();  // empty until the first payload is checked
      if (bytes.data() != known.data() || bytes.size() != known.size())
        checked = {message.payload, payload_crc32(bytes)};
      crc = checked.crc;
    }
    const HeaderBytes header = encode_header_with_crc(message.header, message.payload, crc);
    const std::uint64_t wire_bytes = kHeaderBytes + message.payload.size();
    const bool body = !message.payload.is_phantom() && !message.payload.empty();
    socket.send(zmq::message_t(header.data(), header.size()),
                body ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (body) socket.send(zero_copy_frame(std::move(message.payload)), zmq::send_flags::none);
    owner_.host_.count_message(message.header, wire_bytes);
    if (owner_.host_.tracing())
      owner_.trace_lane("send->" + std::to_string(message.header.recipient), "send",
                        span_name(message.header), start, owner_.now(), trace_message(message));
    return wire_bytes;
  }

  // Validates one multipart message [routing id, header, payload?] and delivers it, or rejects it
  // with a log line naming the field at fault. Never trusts a length before checking it.
  void handle(std::vector<zmq::message_t>& parts, Seconds start) {
    if (parts.empty()) return;
    const std::string routing_id = parts[0].to_string();
    const auto member = members_.find(routing_id);
    // Counted against the node a member's connection is bound to, else against the peer's host.
    const std::string from = member != members_.end() && member->second != kNoNode
                                 ? "node " + std::to_string(member->second)
                                 : peer_host(parts.back());
    auto reject = [&](std::string_view field, const std::string& detail) {
      ++owner_.rejected_;
      owner_.refuse(from, "rejected a frame: " + std::string(field) + ": " + detail);
    };
    if (key_ && member == members_.end()) {
      prove_membership(routing_id, parts, from);
      return;
    }
    if (parts.size() < 2 || parts.size() > 3) {
      reject("frames", "expected a header and at most one payload frame, got " +
                           std::to_string(parts.size() - (parts.empty() ? 0 : 1)) + " frames");
      return;
    }
    const auto& head = parts[1];
    if (head.size() != kHeaderBytes) {
      reject("header",
             "frame has " + std::to_string(head.size()) + " bytes, expected " + std::to_string(kHeaderBytes));
      return;
    }
    Message message;
    bool phantom = false;
    if (auto error =
            decode_header(std::span(head.data<std::byte>(), head.size()), message.header, phantom, limits_)) {
      reject(error->field, error->detail);
      return;
    }
    const std::uint64_t carried = parts.size() == 3 ? parts[2].size() : 0;
    if (phantom) {
      if (carried != 0)
        return reject("payload_length", "phantom frame carries " + std::to_string(carried) + " bytes");
      if (message.header.payload_crc != 0) return reject("payload_crc", "phantom frame must have CRC 0");
      message.payload = Payload::phantom(message.header.payload_length);
    } else {
      if (carried != message.header.payload_length)
        return reject("payload_length", "header says " + std::to_string(message.header.payload_length) +
                                            " bytes, payload frame has " + std::to_string(carried));
      const std::span<const std::byte> body = carried == 0
                                                  ? std::span<const std::byte>()
                                                  : std::span(parts[2].data<std::byte>(), parts[2].size());
      if (const auto crc = payload_crc32(body); crc != message.header.payload_crc)
        return reject("payload_crc", "header says " + std::to_string(message.header.payload_crc) +
                                         ", payload gives " + std::to_string(crc));
      if (carried != 0) {
        std::uint64_t copied = 0;
        message.payload = adopt_frame(std::move(parts[2]), copied);
        if (copied != 0) owner_.received_bytes_copied_ += copied;
      }
    }
    // Bound to the first node it names; another node's message on it is forged. A frame for
    // another node is refused too (ZeroMQ has no misrouting of its own).
    NodeId& bound = member != members_.end() ? member->second : members_[routing_id];
    const NodeId self = owner_.self();
    if (bound != kNoNode && message.header.sender != bound)
      return reject("sender", "a message claiming node " + std::to_string(message.header.sender) +
                                  " on the connection of node " + std::to_string(bound));
    // The scheduler answers a registrant through a connection id of its own (ps/ids.hpp), which may
    // arrive after the node table gave the node its id.
    if (self != kNoNode && message.header.recipient != self && message.header.recipient < kRegistrantIdBase)
      return reject("recipient", "frame for node " + std::to_string(message.header.recipient) +
                                     " arrived at node " + std::to_string(self) + " (misrouted)");
    if (bound == kNoNode) bound = message.header.sender;
    if (owner_.host_.tracing())
      owner_.trace_lane("recv<-" + std::to_string(message.header.sender), "receive",
                        span_name(message.header), start, owner_.now(), trace_message(message));
    owner_.deliver(std::move(message));
  }

  // A connection that has not proven membership: its first message must ask for a challenge, its
  // second answer it; anything else, or a wrong answer, is refused (ZeroMQ's ROUTER cannot close one
  // connection: whatever else it sends is refused the same way).
  void prove_membership(const std::string& routing_id, std::vector<zmq::message_t>& parts,
                        const std::string& from) {
    const auto pending = unproven_.find(routing_id);
    const bool one_frame = parts.size() == 2;
    if (pending == unproven_.end()) {
      if (!one_frame || !is_hello(bytes_of(parts[1]))) {
        ++owner_.rejected_;
        owner_.refuse(from,
                      "a message on a connection that has not proven membership (its sender has no "
                      "PSTWIN_JOB_TOKEN, or another job's)");
        return;
      }
      // Past the cap the oldest goes, not the newest: a member proves within a round trip, so a
      // flood of unanswered hellos cannot keep it out.
      if (unproven_.size() >= kMaxUnproven) {
        const auto oldest = std::ranges::min_element(
            unproven_, [](const auto& a, const auto& b) { return a.second.deadline < b.second.deadline; });
        ++owner_.rejected_;
        owner_.refuse(oldest->second.host, "the oldest of " + std::to_string(unproven_.size()) +
                                               " connections proving membership (at most " +
                                               std::to_string(kMaxUnproven) + " at once) while another came");
        unproven_.erase(oldest);
      }
      const auto challenge = JobKey::challenge();
      router_.send(zmq::message_t(routing_id.data(), routing_id.size()), zmq::send_flags::sndmore);
      router_.send(zmq::message_t(challenge.data(), challenge.size()), zmq::send_flags::dontwait);
      unproven_.emplace(routing_id, Unproven{challenge, owner_.now() + kHandshakeTimeoutS, from});
      return;
    }
    const bool proven = one_frame && key_->verify(pending->second.challenge, bytes_of(parts[1]));
    unproven_.erase(pending);
    if (!proven) {
      ++owner_.rejected_;
      owner_.refuse(from, "wrong membership proof: the peer does not hold this job's PSTWIN_JOB_TOKEN");
      return;
    }
    members_.emplace(routing_id, kNoNode);
  }

  void expire_unproven() {
    if (unproven_.empty()) return;
    const Seconds now = owner_.now();
    for (auto it = unproven_.begin(); it != unproven_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      ++owner_.rejected_;
      owner_.refuse(it->second.host, "did not prove membership within " +
                                         std::to_string(static_cast<int>(kHandshakeTimeoutS)) + " s");
      it = unproven_.erase(it);
    }
  }

  static void ask_challenge(zmq::socket_t& dealer) {
    // Asks for a challenge; our messages wait in outgoing_ until the proof has left.
    const auto hello = hello_bytes();
    dealer.send(zmq::message_t(hello.data(), hello.size()), zmq::send_flags::none);
  }

  // A DEALER whose connection dropped: ZeroMQ connects it again, and the hello queued now is the
  // first thing the new connection carries; what was sent before the drop was noticed is lost with
  // it (as without a job token), and the peer refuses what arrives ahead of the hello.
  // Each monitor is read until empty, so its ZMQ_FD signals the next event.
  void reprove_reconnected() {
    check_monitors_ = false;
    for (auto& [address, dealer] : dealers_) {
      if (!dealer.monitor) continue;
      bool dropped = false;
      std::vector<zmq::message_t> event;
      while (zmq::recv_multipart(*dealer.monitor, std::back_inserter(event), zmq::recv_flags::dontwait)) {
        dropped = true;  // the only event asked for
        event.clear();
      }
      if (!dropped) continue;
      // A challenge the old connection brought is worth nothing on the new one.
      zmq::message_t stale;
      while (dealer.socket.recv(stale, zmq::recv_flags::dontwait)) {
      }
      if (dealer.proven) {
        dealer.proven = false;
        ++unproven_dealers_;
        owner_.log("connection to " + address + " dropped; proving membership again when it is back");
      } else if (!dealer.dropped_unproven) {
        // Said once: ZeroMQ keeps reconnecting, and a peer that refuses this node's CURVE handshake
        // (or its lack of one) drops every attempt.
        dealer.dropped_unproven = true;
        owner_.log("connection to " + address +
                   " dropped before it proved membership; trying again (does the node there have this "
                   "job's PSTWIN_JOB_TOKEN and the same PSTWIN_ENCRYPT?)");
      }
      ask_challenge(dealer.socket);
    }
  }

  // Our DEALERs waiting for their peer's challenge: each answers it, then its messages may go.
  void answer_challenges() {
    for (auto& [address, dealer] : dealers_) {
      if (dealer.proven) continue;
      zmq::message_t frame;
      while (!dealer.proven && dealer.socket.recv(frame, zmq::recv_flags::dontwait)) {
        const auto proof = key_->prove(bytes_of(frame));
        if (!proof) {
          owner_.fail("node at " + address +
                      " answered with something other than a membership challenge: is it a pstwin node "
                      "of this job with PSTWIN_JOB_TOKEN set (every node of a job needs it, or none)?");
          return;
        }
        dealer.socket.send(zmq::message_t(proof->data(), proof->size()), zmq::send_flags::none);
        dealer.proven = true;
        --unproven_dealers_;
      }
    }
  }

  struct Dealer {
    zmq::socket_t socket;
    bool proven = true;                    // with a job key: false until the peer's challenge is answered
    int fd = -1;                           // ZMQ_FD, polled while not proven
    std::optional<zmq::socket_t> monitor;  // with a job key: the socket's disconnections
    int monitor_fd = -1;
    bool dropped_unproven = false;  // a connection dropped before it proved membership was logged
  };
  // A connection to our ROUTER that was sent a challenge and has not answered it yet.
  struct Unproven {
    HandshakeBytes challenge;
    Seconds deadline = 0;
    std::string host;
  };

  ZmqNodeRuntime& owner_;
  DecodeLimits limits_{};
  std::optional<JobKey> key_;          // PSTWIN_JOB_TOKEN's
  std::optional<CurveKeyPair> curve_;  // with PSTWIN_ENCRYPT=curve: the job's, from key_
  zmq::context_t context_{1};          // first: destroyed last, after every socket
  zmq::socket_t router_{context_, zmq::socket_type::router};
  std::map<std::string, Dealer> dealers_;  // one per peer address
  std::map<NodeId, Dealer*> routes_;
  std::size_t unproven_dealers_ = 0;
  bool check_monitors_ = false;  // a DEALER's monitor may hold an event
  // Connections to our ROUTER by routing id: members (bound to the first node they name; kNoNode until
  // then) and, with a job key, those proving membership.
  std::map<std::string, NodeId> members_;
  std::map<std::string, Unproven> unproven_;
  std::map<NodeId, std::map<SendOrderKey, Message>> outgoing_;
  fpt::MessagePacer pacer_;
  EventFd wake_;
  std::string address_;
  int router_fd_ = -1;
  bool router_ready_ = true;  // the ROUTER may hold messages: receive_all() must look
};

// ---------------------------------------------------------------- ZmqNodeRuntime

ZmqNodeRuntime::ZmqNodeRuntime(LocalHost& host, Options options)
    : LoopRuntime(host, std::move(options)), sockets_(std::make_unique<Sockets>(*this)) {
  set_address(sockets_->address());
}

ZmqNodeRuntime::~ZmqNodeRuntime() {
  shut_down();
  sockets_.reset();  // with linger > 0, waits for what was handed to ZeroMQ to leave
}

void ZmqNodeRuntime::bind_peer(NodeId id, const std::string& address) {
  sockets_->connect(id, address);
}

void ZmqNodeRuntime::queue(Message message) {
  sockets_->queue(std::move(message));
}

void ZmqNodeRuntime::receive() {
  sockets_->receive_all();
}

void ZmqNodeRuntime::flush() {
  sockets_->flush();
}

void ZmqNodeRuntime::wait(long timeout_ms) {
  sockets_->wait(timeout_ms);
}

void ZmqNodeRuntime::set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) {
  sockets_->set_send_weights(version, weights);
}

void ZmqNodeRuntime::wake() {
  sockets_->wake().signal();
}

struct RawDealer::Sockets {
  zmq::context_t context{1};
  zmq::socket_t dealer{context, zmq::socket_type::dealer};
};

RawDealer::RawDealer(std::string_view address, const std::optional<CurveKeyPair>& curve)
    : sockets_(std::make_unique<Sockets>()) {
  sockets_->dealer.set(zmq::sockopt::linger, 2000);
  if (curve) make_curve_client(sockets_->dealer, *curve);
  sockets_->dealer.connect("tcp://" + std::string(address));
}

RawDealer::~RawDealer() = default;

void RawDealer::send(const std::vector<std::string>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i)
    sockets_->dealer.send(zmq::buffer(frames[i]),
                          i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

std::optional<std::string> RawDealer::receive(int timeout_ms) {
  sockets_->dealer.set(zmq::sockopt::rcvtimeo, timeout_ms);
  std::vector<zmq::message_t> parts;
  if (!zmq::recv_multipart(sockets_->dealer, std::back_inserter(parts)) || parts.empty()) return std::nullopt;
  return parts[0].to_string();
}

void send_raw(std::string_view address, const std::vector<std::string>& frames, int linger_ms) {
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, linger_ms);
  dealer.connect("tcp://" + std::string(address));
  for (std::size_t i = 0; i < frames.size(); ++i)
    dealer.send(zmq::buffer(frames[i]),
                i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  // Closing the socket, then the context, waits up to the linger time for the frames to leave.
}

}  // namespace pstwin::realnet
