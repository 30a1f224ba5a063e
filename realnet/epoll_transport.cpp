#include "realnet/epoll_transport.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <new>
#include <stdexcept>
#include <vector>

#include "core/assert.hpp"
#include "fpt/message_pacer.hpp"
#include "ps/ids.hpp"

namespace pstwin::realnet {

namespace {

constexpr std::size_t kInBufferBytes = 64 * 1024;    // staging for headers and small payloads
constexpr std::size_t kDirectReadBytes = 16 * 1024;  // larger payload remainders are read in place
constexpr std::size_t kBatchMessages = 64;           // messages taken from the pool per send-loop turn
constexpr std::uint64_t kBatchBytes = 4 << 20;       // ... and bytes
constexpr std::size_t kMaxIov = 128;                 // iovecs per sendmsg
constexpr int kMaxEvents = 64;
constexpr std::uint64_t kPooledFromBytes = 16 * 1024;  // smaller payloads come from malloc's caches
// A payload larger than kCrcTrailerAboveBytes (the development VM's L2 per core: a smaller one is
// still in cache between its CRC and the kernel's copy) is sent with its CRC after it, checksummed
// and written kCrcPieceBytes at a time, so that sendmsg copies each piece from cache instead of
// streaming the payload from memory once for the CRC and once more for the copy (docs/PERFORMANCE.md,
// "Large messages").
constexpr std::uint64_t kCrcTrailerAboveBytes = 1 << 20;
constexpr std::uint64_t kCrcPieceBytes = 256 * 1024;
// While a large payload comes in, its socket wakes the receiver (SO_RCVLOWAT) once this much of it is
// there (or all the rest), not for every piece the sender writes: with the sender writing 256 KiB at
// a time the receiver otherwise drained each piece, slept and was woken again.
constexpr std::uint64_t kWakeBytes = 1 << 20;

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string errno_text(int error) {
  return std::strerror(error);
}

std::string address_text(const sockaddr_in& address) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(address.sin_port));
}

void epoll_add(int epoll_fd, int fd, std::uint32_t events) {
  epoll_event event{};
  event.events = events;
  event.data.fd = fd;
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &event) != 0) {
    throw std::runtime_error("epoll_ctl(ADD, fd " + std::to_string(fd) + "): " + errno_text(errno));
  }
}

void set_int_option(int fd, int level, int name, int value) {
  setsockopt(fd, level, name, &value, sizeof value);  // best effort: a refusal only costs latency
}

// Moves the front of `bytes` into a fixed-size field of which `have` bytes are in; true once it is full.
template <std::size_t N>
bool fill_field(std::array<std::byte, N>& field, std::size_t& have, std::span<const std::byte>& bytes) {
  const std::size_t take = std::min(bytes.size(), N - have);
  std::memcpy(field.data() + have, bytes.data(), take);
  have += take;
  bytes = bytes.subspan(take);
  return have == N;
}

// One payload buffer per frame, not zeroed first (every byte is about to be read into it), from plain
// malloc with the alignment slack inside (ByteBuffer's). std::aligned_alloc split the slack off as
// small free chunks that kept the heap fragmented: the partition sweep's job with 16,000-byte
// partitions took 75-114 ms an iteration with it, 47-70 ms without (docs/PERFORMANCE.md, "Epoll van on
// loopback").
std::shared_ptr<ByteBuffer> fresh_buffer(std::uint64_t size) {
  return std::make_shared<ByteBuffer>(static_cast<std::size_t>(size), ByteBuffer::ForOverwrite{});
}

}  // namespace

// Our connection to one peer. `frames` are committed (taken from the pool, partly written maybe);
// only the send thread touches them.
// How much of a payload sent with a CRC trailer has been checksummed: shared by the frames of one
// batch that carry the same payload (the server's aggregate to every worker), so it is read once.
struct CrcProgress {
  std::uint64_t covered = 0;  // the first `covered` payload bytes
  std::uint32_t crc = 0;      // their CRC-32
  void cover(std::span<const std::byte> payload, std::uint64_t upto) {
    if (upto <= covered) return;
    crc = payload_crc32_extend(crc, payload.subspan(covered, upto - covered));
    covered = upto;
  }
};

struct EpollTransport::OutConnection {
  struct Frame {
    HeaderBytes header;
    Payload payload;         // frozen: real bytes or a phantom (nothing follows the header)
    std::uint64_t sent = 0;  // bytes of header + payload (+ trailer) already written
    // With a CRC trailer (a large payload): the payload is checksummed a piece at a time just before
    // the piece is written, and the trailer, filled in once all of it is, follows it.
    std::shared_ptr<CrcProgress> crc;
    TrailerBytes trailer{};
    std::uint64_t payload_size() const { return payload.is_phantom() ? 0 : payload.size(); }
    std::uint64_t size() const { return kHeaderBytes + payload_size() + (crc ? kTrailerBytes : 0); }
  };
  NodeId peer = kNoNode;
  std::string name;
  FileDescriptor fd;
  std::deque<Frame> frames;
  bool blocked = false;  // waiting for EPOLLOUT
  // With a job key, the pool holds the connection's messages (set_blocked) until the peer's
  // challenge came, our proof left and the peer accepted it; the socket is polled for reading. A
  // connection the peer closes before accepting carried no message of ours, so another is opened
  // (a flood of outsiders evicts the peer's oldest unproven connections, a slow member's among them).
  enum class Membership { kMember, kAwaitingChallenge, kAwaitingAcceptance };
  Membership membership = Membership::kMember;
  HandshakeBytes challenge{};
  std::size_t challenge_have = 0;
  sockaddr_in address{};
  double handshake_started = 0;  // seconds_now() of the first attempt
  int handshake_attempts = 1;
  std::atomic<bool> dead{false};
  // User pacing (guarded by the transport's mutex_): the bytes the connection is ahead of its rate,
  // and until when the pool keeps it out of its rotation for them (held_until 0: not held).
  fpt::PacingAccount pacing;
};

// A peer's connection to us, receive thread only: the frame being read.
struct EpollTransport::InConnection {
  FileDescriptor fd;
  std::string address;
  NodeId sender = kNoNode;  // from the first header that names a node
  // A member: proved membership with the job key, or (without one) sent a well-formed header. What a
  // non-member sends is refused and its connection closed; the node goes on.
  bool trusted = false;
  HandshakeBytes challenge{};  // with a job key: sent at accept
  HandshakeBytes proof{};
  std::size_t proof_have = 0;
  double deadline = 0;            // with a job key, until trusted: when the connection is closed unproven
  bool discard = false;           // the frame being read is refused (forged sender, another node's): dropped
  std::vector<std::byte> buffer;  // kInBufferBytes once it is read as frames: idle ones cost nothing
  HeaderBytes header_bytes{};
  std::size_t header_have = 0;
  bool in_body = false;
  MessageHeader header;
  FrameShape shape;
  std::shared_ptr<ByteBuffer> body;
  std::uint64_t body_have = 0;
  std::uint32_t body_crc = 0;    // of the body_have bytes so far
  bool in_trailer = false;       // the payload is in; its CRC (shape.crc_trailer) is being read
  std::uint64_t wake_bytes = 1;  // the socket's SO_RCVLOWAT (set_wake_threshold)
  TrailerBytes trailer{};
  std::size_t trailer_have = 0;
  // Receive shaping: present while the sender is held to a rate; paused_until > 0 while out of tokens
  // (the socket is off the epoll set's EPOLLIN until then, on the seconds_now() clock).
  std::optional<fpt::TokenBucket> bucket;
  double paused_until = 0;

  std::string name() const {
    return "connection from " + address + (sender == kNoNode ? "" : " (node " + std::to_string(sender) + ")");
  }
  std::string host() const { return address.substr(0, address.rfind(':')); }
  bool mid_frame() const { return header_have > 0 || in_body || in_trailer; }
};

EpollTransport::EpollTransport(NodeId self, Options options, Callbacks callbacks)
    : self_(self),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)),
      pool_(options_.pool),
      buffers_(BufferPool::create(options_.buffer_pool_bytes)),
      receive_shaper_(options_.pool.link_rate_Bps) {
  if (auto error = fpt::SendPool::validate(options_.pool)) throw std::runtime_error("pool: " + *error);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(options_.port);
  if (inet_pton(AF_INET, options_.bind_host.c_str(), &address.sin_addr) != 1) {
    throw std::runtime_error("bind_host \"" + options_.bind_host +
                             "\" is not a numeric IPv4 address: use e.g. 127.0.0.1");
  }
  listen_fd_.reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (listen_fd_.get() < 0) throw std::runtime_error("socket: " + errno_text(errno));
  set_int_option(listen_fd_.get(), SOL_SOCKET, SO_REUSEADDR, 1);
  const std::string where = options_.bind_host + ":" + std::to_string(options_.port);
  if (::bind(listen_fd_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    // The caller knows which setting chose the port, so the fix is its to name.
    throw std::runtime_error("cannot bind " + where + ": " + errno_text(errno));
  }
  // The kernel's largest backlog: when the accept queue overflows, a connection the client already
  // counts as open waits in SYN_RECV for seconds (or is dropped), so a flood of outsiders would
  // delay members' connections and their handshake deadlines would start late.
  if (::listen(listen_fd_.get(), SOMAXCONN) != 0)
    throw std::runtime_error("listen on " + where + ": " + errno_text(errno));
  socklen_t length = sizeof address;
  getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);

  spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  stop_fd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  wake_fd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  send_epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  receive_epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (stop_fd_.get() < 0 || wake_fd_.get() < 0 || send_epoll_.get() < 0 || receive_epoll_.get() < 0) {
    throw std::runtime_error("eventfd/epoll_create1: " + errno_text(errno));
  }
  epoll_add(receive_epoll_.get(), listen_fd_.get(), EPOLLIN);
  if (!options_.own_threads) {
    epoll_add(receive_epoll_.get(), wake_fd_.get(), EPOLLIN);  // one epoll set for everything
    return;
  }
  epoll_add(send_epoll_.get(), stop_fd_.get(), EPOLLIN);
  epoll_add(send_epoll_.get(), wake_fd_.get(), EPOLLIN);
  epoll_add(receive_epoll_.get(), stop_fd_.get(), EPOLLIN);
  send_thread_ = std::jthread([this] { send_loop(); });
  receive_thread_ = std::jthread([this] { receive_loop(); });
}

EpollTransport::~EpollTransport() {
  stop();
}

void EpollTransport::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(stop_fd_.get(), &one, sizeof one);
  if (send_thread_.joinable()) send_thread_.join();
  if (receive_thread_.joinable()) receive_thread_.join();
  std::lock_guard lock(mutex_);
  for (auto& [peer, connection] : out_) pool_.drop(peer);
  out_by_fd_.clear();
  out_.clear();  // closes every outgoing socket
  in_.clear();   // and every accepted one
  paused_ = 0;
}

void EpollTransport::report(const std::string& peer, const std::string& field, const std::string& detail) {
  if (callbacks_.on_error) callbacks_.on_error(TransportError{peer, field, detail, false, ""});
}

void EpollTransport::report_in(const InConnection& c, const std::string& field, const std::string& detail,
                               bool keep_connection) {
  if (!callbacks_.on_error) return;
  if (c.trusted && !keep_connection) {
    // A member's stream is out of step (a corrupt or oversized frame): nothing after it can be framed,
    // so its connection goes. No single message may stop a node: this is a refusal, and the member's
    // next send finds its connection reset and opens another, as after any lost connection.
    callbacks_.on_error(TransportError{
        c.name(), field, detail + "; connection dropped (the member opens another)", true,
        c.sender == kNoNode ? "registrant at " + c.host() : "node " + std::to_string(c.sender)});
    return;
  }
  callbacks_.on_error(TransportError{
      c.name(), field,
      detail + (keep_connection ? "; message dropped" : "; connection closed (not a member of the job)"),
      true,
      !c.trusted            ? c.host()
      : c.sender == kNoNode ? "registrant at " + c.host()
                            : "node " + std::to_string(c.sender)});
}

std::optional<std::string> EpollTransport::connect(NodeId peer, const std::string& host, std::uint16_t port,
                                                   bool* refused, int timeout_ms) {
  if (refused != nullptr) *refused = false;
  if (peer == kNoNode)
    return "connect: peer is kNoNode (" + std::to_string(kNoNode) + "): pass the peer's node id";
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    return "connect: host \"" + host + "\" is not a numeric IPv4 address: use e.g. 127.0.0.1";
  }
  const std::string name =
      "connection to node " + std::to_string(peer) + " at " + host + ":" + std::to_string(port);
  FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (timeout_ms >= 0 ? SOCK_NONBLOCK : 0), 0));
  if (fd.get() < 0) return name + ": socket: " + errno_text(errno);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    int error = errno;
    if (error == EINPROGRESS) {
      pollfd writable{fd.get(), POLLOUT, 0};
      int ready = 0;
      do {
        ready = ::poll(&writable, 1, timeout_ms);
      } while (ready < 0 && errno == EINTR);
      if (ready == 0) {
        if (refused != nullptr) *refused = true;  // tried again later, as a listener not up yet
        return name + ": connect: no answer within " + std::to_string(timeout_ms) + " ms";
      }
      socklen_t size = sizeof error;
      if (ready < 0 || ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
    }
    if (error != 0) {
      if (refused != nullptr) *refused = error == ECONNREFUSED;
      return name + ": connect: " + errno_text(error);
    }
  }
  set_int_option(fd.get(), IPPROTO_TCP, TCP_NODELAY, 1);
  if (options_.notsent_lowat > 0)
    set_int_option(fd.get(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, options_.notsent_lowat);
  const int flags = fcntl(fd.get(), F_GETFL);
  fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);

  auto connection = std::make_unique<OutConnection>();
  connection->peer = peer;
  connection->name = name;
  connection->fd = std::move(fd);
  connection->address = address;
  connection->handshake_started = seconds_now();
  if (options_.job_key) connection->membership = OutConnection::Membership::kAwaitingChallenge;
  std::lock_guard lock(mutex_);
  if (stopped_) return name + ": the transport is stopped";
  if (out_.contains(peer)) return name + ": node " + std::to_string(peer) + " is already connected";
  if (connection->membership != OutConnection::Membership::kMember) {
    // Nothing leaves before our proof: the peer would refuse it. Its challenge wakes on_writable().
    pool_.set_blocked(peer, true);
    epoll_add(out_epoll(), connection->fd.get(), EPOLLIN | EPOLLRDHUP);
  }
  apply_pacing(*connection);
  out_by_fd_[connection->fd.get()] = connection.get();
  out_.emplace(peer, std::move(connection));
  return std::nullopt;
}

// The pool decides each connection's share of the NIC; the kernel enforces it (TCP paces a socket
// with SO_MAX_PACING_RATE itself, no fq qdisc needed), the way the simulator bounds the flow.
void EpollTransport::apply_pacing(OutConnection& connection) {
  if (options_.pool.link_rate_Bps <= 0) return;
  const double rate = options_.pacing == Options::Pacing::kKernel ? pool_.pacing_rate(connection.peer) : 0;
  const std::uint64_t cap =
      rate > 0 ? static_cast<std::uint64_t>(rate) : std::numeric_limits<std::uint64_t>::max();
  // A kernel that refuses leaves the connection unpaced (pacing_rate() shows it); nothing is lost.
  [[maybe_unused]] const int ignored =
      ::setsockopt(connection.fd.get(), SOL_SOCKET, SO_MAX_PACING_RATE, &cap, sizeof cap);
}

void EpollTransport::pace(OutConnection& connection, std::uint64_t bytes, double now) {
  const double rate = pool_.pacing_rate(connection.peer);
  if (rate <= 0) return;
  if (connection.pacing.held_until <= 0) ++held_;
  connection.pacing.charge(bytes, now, rate);
  pool_.set_paced(connection.peer, true);
}

void EpollTransport::release_paced(double now) {
  if (held_ == 0) return;
  for (auto& [peer, connection] : out_) {
    if (connection->pacing.held_until <= 0 || connection->pacing.held_until > now) continue;
    connection->pacing.held_until = 0;
    --held_;
    pool_.set_paced(peer, false);
  }
}

int EpollTransport::paced_timeout(int timeout_ms) const {
  double earliest = 0;
  {
    std::lock_guard lock(mutex_);
    if (held_ == 0) return timeout_ms;
    for (const auto& [peer, connection] : out_)
      if (connection->pacing.held_until > 0 && (earliest == 0 || connection->pacing.held_until < earliest))
        earliest = connection->pacing.held_until;
  }
  if (earliest == 0) return timeout_ms;
  const int until = static_cast<int>(std::ceil(std::max(0.0, earliest - seconds_now()) * 1000));
  return timeout_ms < 0 ? until : std::min(timeout_ms, until);
}

std::optional<std::uint64_t> EpollTransport::pacing_rate(NodeId peer) const {
  std::lock_guard lock(mutex_);
  const auto it = out_.find(peer);
  if (it == out_.end()) return std::nullopt;
  std::uint64_t cap = 0;
  socklen_t size = sizeof cap;
  if (::getsockopt(it->second->fd.get(), SOL_SOCKET, SO_MAX_PACING_RATE, &cap, &size) != 0)
    return std::nullopt;
  // A 32-bit read-back (older kernels) says ~0U for unpaced.
  if (size == sizeof(std::uint32_t) && static_cast<std::uint32_t>(cap) == ~0U)
    return std::numeric_limits<std::uint64_t>::max();
  return cap;
}

std::optional<std::string> EpollTransport::send(NodeId peer, Message message) {
  message.header.sender = self_.load();
  message.header.recipient = peer;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return "send to node " + std::to_string(peer) + ": the transport is stopped";
    const auto it = out_.find(peer);
    if (it == out_.end())
      return "send: node " + std::to_string(peer) + " is not connected: call connect() first";
    if (it->second->dead) return "send: " + it->second->name + " was lost";
    if (auto error = pool_.enqueue(peer, std::move(message))) return error;
  }
  if (options_.own_threads) wake();  // the owner of a thread-less transport calls pump()
  return std::nullopt;
}

void EpollTransport::wake() {
  if (!wake_pending_.exchange(true)) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(wake_fd_.get(), &one, sizeof one);
  }
}

std::optional<std::string> EpollTransport::set_weights(std::uint64_t version,
                                                       std::span<const PeerWeight> weights) {
  std::lock_guard lock(mutex_);
  if (auto error = pool_.set_weights(version, weights)) return error;
  for (auto& [peer, connection] : out_) apply_pacing(*connection);
  return std::nullopt;
}

std::optional<std::string> EpollTransport::set_receive_weights(std::uint64_t version,
                                                               std::span<const PeerWeight> weights) {
  {
    std::lock_guard lock(shaping_mutex_);
    if (auto error = receive_shaper_.set_weights(version, weights)) return error;
  }
  shaping_version_.store(version);
  if (!options_.own_threads)
    wake();  // a blocked poll() takes the table up now (the receive thread on its next turn)
  return std::nullopt;
}

double EpollTransport::receive_rate(NodeId sender) const {
  std::lock_guard lock(shaping_mutex_);
  return receive_shaper_.rate(sender);
}

fpt::DestinationStats EpollTransport::stats(NodeId peer) const {
  std::lock_guard lock(mutex_);
  return pool_.stats(peer);
}

// ---- send thread ----

void EpollTransport::fail_out(OutConnection& connection, const std::string& detail, bool lost) {
  const std::size_t committed = connection.frames.size();
  connection.frames.clear();
  epoll_ctl(out_epoll(), EPOLL_CTL_DEL, connection.fd.get(), nullptr);
  std::size_t queued = 0;
  {
    std::lock_guard lock(mutex_);
    out_by_fd_.erase(connection.fd.get());
    if (lost) {
      queued = pool_.stats(connection.peer).queued_messages;
      pool_.set_blocked(connection.peer, true);  // held for forget()
    } else {
      queued = pool_.drop(connection.peer).size();
    }
  }
  connection.fd.reset();
  connection.blocked = false;
  connection.dead = true;
  if (!callbacks_.on_error) return;
  if (!lost) {
    report(connection.name, "connection",
           detail + "; " + std::to_string(committed + queued) + " message(s) to it were not delivered");
    return;
  }
  // Committed frames were written to the kernel in part or in whole: whether they arrived is unknown.
  callbacks_.on_error(TransportError{connection.name, "connection",
                                     detail + "; " + std::to_string(committed) +
                                         " message(s) in flight may be lost, " + std::to_string(queued) +
                                         " still queued",
                                     false, "", true, connection.peer});
}

std::vector<Message> EpollTransport::forget(NodeId peer) {
  PSTWIN_ASSERT(!options_.own_threads, "forget() is for the owner of a transport without threads");
  std::unique_ptr<OutConnection> gone;
  std::vector<Message> queued;
  {
    std::lock_guard lock(mutex_);
    const auto it = out_.find(peer);
    if (it == out_.end()) return queued;
    gone = std::move(it->second);
    out_.erase(it);
    if (gone->fd.get() >= 0) out_by_fd_.erase(gone->fd.get());
    if (gone->pacing.held_until > 0) --held_;
    queued = pool_.drop(peer);
    // A new connection starts unheld (drop() keeps the destination's holds).
    pool_.set_blocked(peer, false);
    pool_.set_paced(peer, false);
  }
  if (gone->fd.get() >= 0) epoll_ctl(out_epoll(), EPOLL_CTL_DEL, gone->fd.get(), nullptr);
  return queued;
}

bool EpollTransport::flush(OutConnection& connection) {
  while (!connection.frames.empty()) {
    std::array<iovec, kMaxIov> iov{};
    std::size_t count = 0;
    for (auto& frame : connection.frames) {
      if (count + 3 > kMaxIov) break;
      std::uint64_t at = frame.sent;  // in the frame
      if (at < kHeaderBytes) {
        iov[count++] = {frame.header.data() + at, kHeaderBytes - at};
        at = kHeaderBytes;
      }
      const std::uint64_t payload_end = kHeaderBytes + frame.payload_size();
      if (at < payload_end) {
        const std::uint64_t from = at - kHeaderBytes;
        std::uint64_t to = frame.payload_size();
        if (frame.crc) {
          // Checksum the next piece now, so that the kernel's copy finds it in cache; what is
          // written is what was checksummed.
          frame.crc->cover(frame.payload.bytes(), std::min(to, from + kCrcPieceBytes));
          to = frame.crc->covered;
        }
        const auto bytes = frame.payload.bytes().subspan(from, to - from);
        iov[count++] = {const_cast<std::byte*>(bytes.data()), bytes.size()};
        if (to < frame.payload_size()) break;  // the rest of the stream waits for the next piece
        at = payload_end;
      }
      if (frame.crc) {
        if (at == payload_end) frame.trailer = encode_crc_trailer(frame.crc->crc);
        const std::uint64_t done = at - payload_end;
        iov[count++] = {frame.trailer.data() + done, kTrailerBytes - done};
      }
    }
    msghdr header{};
    header.msg_iov = iov.data();
    header.msg_iovlen = count;
    const ssize_t written = ::sendmsg(connection.fd.get(), &header, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!connection.blocked) {
          connection.blocked = true;
          {
            std::lock_guard lock(mutex_);
            pool_.set_blocked(connection.peer, true);
          }
          epoll_add(out_epoll(), connection.fd.get(), EPOLLOUT);
        }
        return true;
      }
      fail_out(connection, "send failed: " + errno_text(errno) + " (the peer closed or reset the connection)",
               /*lost=*/true);
      return false;
    }
    auto left = static_cast<std::uint64_t>(written);
    while (left > 0) {
      auto& frame = connection.frames.front();
      const std::uint64_t step = std::min(left, frame.size() - frame.sent);
      frame.sent += step;
      left -= step;
      if (frame.sent == frame.size()) connection.frames.pop_front();
    }
  }
  if (connection.blocked) {
    connection.blocked = false;
    epoll_ctl(out_epoll(), EPOLL_CTL_DEL, connection.fd.get(), nullptr);
    std::lock_guard lock(mutex_);
    pool_.set_blocked(connection.peer, false);
  }
  return true;
}

void EpollTransport::on_writable(int fd) {
  OutConnection* connection = nullptr;
  {
    std::lock_guard lock(mutex_);
    const auto it = out_by_fd_.find(fd);
    if (it != out_by_fd_.end()) connection = it->second;
  }
  if (connection == nullptr) return;
  switch (connection->membership) {
    case OutConnection::Membership::kMember:
      flush(*connection);
      break;
    case OutConnection::Membership::kAwaitingChallenge:
      answer_challenge(*connection);
      break;
    case OutConnection::Membership::kAwaitingAcceptance:
      await_acceptance(*connection);
      break;
  }
}

void EpollTransport::answer_challenge(OutConnection& c) {
  while (c.challenge_have < kHandshakeBytes) {
    const ssize_t got = ::recv(c.fd.get(), c.challenge.data() + c.challenge_have,
                               kHandshakeBytes - c.challenge_have, MSG_DONTWAIT);
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      fail_out(c, "receive failed while proving membership: " + errno_text(errno), /*lost=*/true);
      return;
    }
    if (got == 0) {
      // A member sends its challenge at accept, whatever its token: the peer went, or evicted us.
      fail_out(c, "the peer closed the connection before it sent a membership challenge", /*lost=*/true);
      return;
    }
    c.challenge_have += static_cast<std::size_t>(got);
  }
  const auto proof = options_.job_key->prove(c.challenge);
  if (!proof) {
    fail_out(c,
             "the peer's first bytes are not a membership challenge: is it a pstwin node of this job "
             "with PSTWIN_JOB_TOKEN set (every node of a job needs it, or none)?");
    return;
  }
  // 40 bytes into a fresh socket's empty send buffer: all of them or an error.
  if (::send(c.fd.get(), proof->data(), proof->size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
      static_cast<ssize_t>(proof->size())) {
    retry_handshake(c, "could not send the membership proof: " + errno_text(errno));
    return;
  }
  c.membership = OutConnection::Membership::kAwaitingAcceptance;
  await_acceptance(c);  // rarely there already; the socket stays polled for it
}

void EpollTransport::await_acceptance(OutConnection& c) {
  std::byte answer{};
  ssize_t got = 0;
  do {
    got = ::recv(c.fd.get(), &answer, 1, MSG_DONTWAIT);
  } while (got < 0 && errno == EINTR);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
  if (got == 1 && answer == kProofAccepted) {
    epoll_ctl(out_epoll(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
    c.membership = OutConnection::Membership::kMember;
    std::lock_guard lock(mutex_);
    pool_.set_blocked(c.peer, false);
    return;
  }
  if (got == 1 && answer == kProofRefused) {
    fail_out(c,
             "the peer refused our membership proof: it holds another PSTWIN_JOB_TOKEN (every node of a job "
             "needs the same one)");
    return;
  }
  if (got == 1) {
    fail_out(c,
             "the peer answered our membership proof with an unknown byte: is it a pstwin node of this job?");
    return;
  }
  retry_handshake(c, got == 0 ? "closed" : errno_text(errno));
}

void EpollTransport::retry_handshake(OutConnection& c, const std::string& why) {
  const double patience = 2 * options_.handshake_timeout_s;
  if (seconds_now() - c.handshake_started > patience) {
    fail_out(c,
             "the peer closed the connection before accepting our membership proof " +
                 std::to_string(c.handshake_attempts) + " times in " + std::to_string(patience) +
                 " s (last: " + why +
                 "): it is flooded with connections that evict those still proving membership (its refused "
                 "counts name their addresses)");
    return;
  }
  ++c.handshake_attempts;
  // Non-blocking: the send thread waits for nothing; a refused attempt shows as an error on the
  // socket, read where the challenge is awaited.
  FileDescriptor fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) {
    fail_out(c, "socket for another membership attempt: " + errno_text(errno));
    return;
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&c.address), sizeof c.address) != 0 &&
      errno != EINPROGRESS) {
    fail_out(c, "connect for another membership attempt: " + errno_text(errno));
    return;
  }
  set_int_option(fd.get(), IPPROTO_TCP, TCP_NODELAY, 1);
  if (options_.notsent_lowat > 0)
    set_int_option(fd.get(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, options_.notsent_lowat);
  epoll_ctl(out_epoll(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  {
    std::lock_guard lock(mutex_);
    out_by_fd_.erase(c.fd.get());
    c.fd = std::move(fd);
    out_by_fd_[c.fd.get()] = &c;
  }
  c.challenge_have = 0;
  c.membership = OutConnection::Membership::kAwaitingChallenge;
  epoll_add(out_epoll(), c.fd.get(), EPOLLIN | EPOLLRDHUP);
}

bool EpollTransport::send_batch() {
  std::array<OutConnection*, kBatchMessages> touched{};
  std::size_t touched_count = 0;
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return false;
    const bool user_pacing = options_.pacing == Options::Pacing::kUser && options_.pool.link_rate_Bps > 0;
    const double now = user_pacing ? seconds_now() : 0;
    if (user_pacing) release_paced(now);
    std::uint64_t bytes = 0;
    // One CRC for a payload that goes to several peers in this batch (the server's aggregate to
    // every worker): the earlier frame keeps those bytes alive until the batch is written.
    std::span<const std::byte> last_checked;
    std::uint32_t last_crc = 0;
    std::shared_ptr<CrcProgress> last_progress;
    for (std::size_t n = 0; n < kBatchMessages && bytes < kBatchBytes; ++n) {
      auto out = pool_.next();
      if (!out) break;
      OutConnection& connection = *out_.at(out->destination);
      const Payload payload = out->message.payload.frozen();
      const bool real = options_.payload_crc && !payload.is_phantom();
      const auto body = real ? payload.bytes() : std::span<const std::byte>{};
      const bool same = real && body.data() == last_checked.data() && body.size() == last_checked.size();
      if (real && !same) {
        last_checked = body;
        last_progress.reset();
      }
      OutConnection::Frame frame;
      frame.payload = payload;
      if (real && body.size() > kCrcTrailerAboveBytes) {
        // Checksummed piece by piece as it is written (flush), the CRC after it: checksumming it
        // all here would stream it from memory once more before the kernel's copy does.
        if (!same || !last_progress) last_progress = std::make_shared<CrcProgress>();
        frame.crc = last_progress;
        frame.header = encode_header_crc_trailer(out->message.header, payload);
      } else {
        if (real && !same) last_crc = payload_crc32(body);
        frame.header = encode_header_with_crc(out->message.header, payload, real ? last_crc : 0);
      }
      bytes += frame.size();
      if (user_pacing && !payload.is_phantom() && payload.size() > 0) pace(connection, frame.size(), now);
      connection.frames.push_back(std::move(frame));
      const auto end = touched.begin() + static_cast<std::ptrdiff_t>(touched_count);
      if (std::find(touched.begin(), end, &connection) == end) touched[touched_count++] = &connection;
    }
  }
  for (std::size_t i = 0; i < touched_count; ++i) {
    if (!touched[i]->blocked) flush(*touched[i]);
  }
  return touched_count > 0;
}

void EpollTransport::send_loop() {
  std::array<epoll_event, kMaxEvents> events{};
  bool idle = false;
  for (;;) {
    const int ready = epoll_wait(send_epoll_.get(), events.data(), kMaxEvents, idle ? paced_timeout(-1) : 0);
    for (int i = 0; i < ready; ++i) {
      const int fd = events[static_cast<std::size_t>(i)].data.fd;
      if (fd == stop_fd_.get()) return;
      if (fd == wake_fd_.get()) {
        std::uint64_t count = 0;
        [[maybe_unused]] const auto got = ::read(fd, &count, sizeof count);
        continue;
      }
      on_writable(fd);
    }
    // Clear the flag before looking at the pool: a send() after the look signals the eventfd.
    wake_pending_.store(false);
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
    }
    // A destination with enough committed stays out of this batch, so priorities keep their meaning.
    idle = !send_batch();
  }
}

void EpollTransport::pump() {
  while (send_batch()) {
  }
}

bool EpollTransport::idle() const {
  std::lock_guard lock(mutex_);
  if (!pool_.empty()) return false;
  return std::ranges::all_of(out_, [](const auto& entry) { return entry.second->frames.empty(); });
}

void EpollTransport::poll(int timeout_ms) {
  std::array<epoll_event, kMaxEvents> events{};
  take_up_receive_shaping();
  resume_due();
  expire_unproven();
  const int ready = epoll_wait(receive_epoll_.get(), events.data(), kMaxEvents, poll_timeout(timeout_ms));
  if (ready < 0 && errno != EINTR) {
    report("node " + std::to_string(self_.load()), "connection", "epoll_wait failed: " + errno_text(errno));
    return;
  }
  for (int i = 0; i < ready; ++i) {
    const auto& event = events[static_cast<std::size_t>(i)];
    const int fd = event.data.fd;
    if (fd == wake_fd_.get()) {
      std::uint64_t count = 0;
      [[maybe_unused]] const auto got = ::read(fd, &count, sizeof count);
      // After the read: a wake() before this line finds the owner awake and about to look.
      wake_pending_.store(false);
    } else if (fd == watched_fd_) {
      std::uint64_t expirations = 0;
      [[maybe_unused]] const auto got = ::read(fd, &expirations, sizeof expirations);
    } else if (fd != listen_fd_.get() && !in_.contains(fd)) {
      on_writable(fd);  // one of our blocked connections (writable, or in error)
    } else {
      on_readable(fd, (event.events & (EPOLLHUP | EPOLLERR)) != 0);
    }
  }
}

int EpollTransport::poll_timeout(int timeout_ms) const {
  return unproven_timeout(paced_timeout(shaped_timeout(timeout_ms)));
}

void EpollTransport::watch(int fd) {
  PSTWIN_ASSERT(!options_.own_threads && watched_fd_ < 0, "watch() is for a thread-less transport, once");
  watched_fd_ = fd;
  epoll_add(receive_epoll_.get(), fd, EPOLLIN);
}

bool EpollTransport::drain(int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    pump();
    if (idle()) return true;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    poll(static_cast<int>(std::min<std::int64_t>(left.count(), 10)));
  }
}

// ---- receive thread ----

void EpollTransport::accept_all() {
  for (;;) {
    sockaddr_in address{};
    socklen_t length = sizeof address;
    const int fd = accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&address), &length,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      if (error == EINTR || error == ECONNABORTED) continue;
      if (error == EMFILE || error == ENFILE) {
        if (!refuse_for_lack_of_descriptors(error)) return;  // the listener is tried again next round
        continue;
      }
      // Whatever else goes wrong with one pending connection is that connection's problem.
      if (error != EAGAIN && error != EWOULDBLOCK && callbacks_.on_error)
        callbacks_.on_error(TransportError{"listener on port " + std::to_string(port_), "connection",
                                           "accept failed: " + errno_text(error), true, "listener"});
      return;
    }
    auto connection = std::make_unique<InConnection>();
    connection->fd.reset(fd);
    connection->address = address_text(address);
    if (options_.job_key) {
      // Past the cap the oldest goes, not the newest: a member proves within a round trip, so a flood
      // of idle connections cannot keep it out.
      if (unproven_ >= options_.max_unproven) evict_oldest_unproven();
      // 40 bytes into a fresh socket's empty send buffer: all of them or an error.
      connection->challenge = JobKey::challenge();
      if (::send(fd, connection->challenge.data(), kHandshakeBytes, MSG_NOSIGNAL | MSG_DONTWAIT) !=
          static_cast<ssize_t>(kHandshakeBytes)) {
        report_in(*connection, "connection", "could not send the membership challenge: " + errno_text(errno));
        continue;
      }
      connection->deadline = seconds_now() + options_.handshake_timeout_s;
      ++unproven_;
    }
    set_int_option(fd, IPPROTO_TCP, TCP_NODELAY, 1);
    epoll_add(receive_epoll_.get(), fd, EPOLLIN | EPOLLRDHUP);
    in_.emplace(fd, std::move(connection));
  }
}

bool EpollTransport::refuse_for_lack_of_descriptors(int error) {
  const std::string why = "out of file descriptors (" + errno_text(error) + ")";
  if (spare_fd_.get() >= 0) {
    spare_fd_.reset();
    sockaddr_in address{};
    socklen_t length = sizeof address;
    const int fd = accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&address), &length, SOCK_CLOEXEC);
    if (fd >= 0) ::close(fd);
    spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (fd >= 0 && callbacks_.on_error) {
      const std::string from = address_text(address);
      callbacks_.on_error(TransportError{"connection from " + from, "connection",
                                         why + ": connection closed at once", true,
                                         from.substr(0, from.rfind(':'))});
    }
    return fd >= 0;
  }
  spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (callbacks_.on_error)
    callbacks_.on_error(TransportError{"listener on port " + std::to_string(port_), "connection",
                                       why + ": a pending connection waits", true, "listener"});
  return false;
}

void EpollTransport::close_in(int fd) {
  const auto it = in_.find(fd);
  if (it == in_.end()) return;
  epoll_ctl(receive_epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  if (it->second->paused_until > 0) --paused_;
  if (options_.job_key && !it->second->trusted) --unproven_;
  in_.erase(it);  // closes it
}

void EpollTransport::evict_oldest_unproven() {
  int oldest = -1;
  double deadline = 0;
  for (const auto& [fd, c] : in_)
    if (!c->trusted && (oldest < 0 || c->deadline < deadline)) {
      oldest = fd;
      deadline = c->deadline;
    }
  if (oldest < 0) return;
  report_in(*in_.at(oldest), "connection",
            "the oldest of " + std::to_string(unproven_) + " connections proving membership (at most " +
                std::to_string(options_.max_unproven) + " at once) while another came");
  close_in(oldest);
}

void EpollTransport::expire_unproven() {
  if (unproven_ == 0) return;
  const double now = seconds_now();
  if (now < next_expiry_check_) return;
  next_expiry_check_ = now + 0.1;
  std::vector<int> late;
  for (const auto& [fd, c] : in_)
    if (!c->trusted && c->deadline <= now) late.push_back(fd);
  for (const int fd : late) {
    const auto& c = *in_.at(fd);
    report_in(c, "connection",
              "did not prove membership within " + std::to_string(options_.handshake_timeout_s) + " s (" +
                  std::to_string(c.proof_have) + " of " + std::to_string(kHandshakeBytes) + " proof bytes)");
    close_in(fd);
  }
}

int EpollTransport::unproven_timeout(int timeout_ms) const {
  if (unproven_ == 0) return timeout_ms;
  constexpr int kCheckMs = 100;
  return timeout_ms < 0 ? kCheckMs : std::min(timeout_ms, kCheckMs);
}

std::optional<bool> EpollTransport::after_failed_read(const InConnection& c) {
  if (errno == EINTR) return std::nullopt;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
  report_lost_in(c, "receive failed: " + errno_text(errno));
  return false;
}

void EpollTransport::report_lost_in(const InConnection& c, const std::string& detail) {
  if (!c.trusted || c.sender == kNoNode) {
    report_in(c, "connection", detail);
    return;
  }
  if (!callbacks_.on_error) return;
  callbacks_.on_error(TransportError{c.name(), "connection",
                                     detail + (c.mid_frame() ? "; the message being read was lost" : ""),
                                     false, "", true, c.sender});
}

bool EpollTransport::read_proof(InConnection& c) {
  while (c.proof_have < kHandshakeBytes) {
    const ssize_t got = ::read(c.fd.get(), c.proof.data() + c.proof_have, kHandshakeBytes - c.proof_have);
    if (got < 0) {
      const auto drained = after_failed_read(c);
      if (!drained) continue;
      return *drained;
    }
    if (got == 0) {
      if (c.proof_have > 0)  // an idle connection that goes is not worth a line
        report_in(c, "connection",
                  "closed after " + std::to_string(c.proof_have) + " of " + std::to_string(kHandshakeBytes) +
                      " membership proof bytes");
      return false;
    }
    c.proof_have += static_cast<std::size_t>(got);
  }
  if (!options_.job_key->verify(c.challenge, c.proof)) {
    // Said, so that a node with another token stops instead of trying again (an outsider learns
    // nothing it would not see from the close).
    [[maybe_unused]] const auto sent = ::send(c.fd.get(), &kProofRefused, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    report_in(c, "connection", "wrong membership proof: the peer does not hold this job's PSTWIN_JOB_TOKEN");
    return false;
  }
  c.trusted = true;
  --unproven_;
  // The peer sends no message before this byte: one whose connection closed without it knows that
  // nothing it sent was read, and tries again.
  if (::send(c.fd.get(), &kProofAccepted, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
    report_in(c, "connection", "could not accept the membership proof: " + errno_text(errno));
    return false;
  }
  return true;
}

bool EpollTransport::finish_header(InConnection& c) {
  MessageHeader header;
  FrameShape frame_shape;
  if (auto error = decode_header(c.header_bytes, header, frame_shape, options_.limits)) {
    report_in(c, error->field, error->detail);
    return false;
  }
  c.trusted = true;  // without a job key, the first well-formed header makes a member
  // The framing holds, so a member's message that may not be here is dropped alone, its connection
  // kept: the frame is read and thrown away.
  const NodeId self = self_.load();
  c.discard = false;
  // The scheduler answers a registrant through a connection id of its own (ps/ids.hpp), which may
  // arrive after the node table gave the node its id.
  if (header.recipient != self && self != kNoNode && header.recipient < kRegistrantIdBase) {
    report_in(c, "recipient",
              "frame for node " + std::to_string(header.recipient) + " arrived at node " +
                  std::to_string(self) + " (misrouted)",
              true);
    c.discard = true;
  } else if (c.sender != kNoNode && header.sender != c.sender) {
    report_in(c, "sender",
              "a message claiming node " + std::to_string(header.sender) + " on the connection of node " +
                  std::to_string(c.sender),
              true);
    c.discard = true;
  } else if (c.sender == kNoNode && header.sender != kNoNode) {
    c.sender = header.sender;  // bound: every later message on it must name this node
    shape(c);
  }
  c.header = header;
  c.shape = frame_shape;
  c.header_have = 0;
  if (frame_shape.phantom || header.payload_length == 0) return end_of_body(c);
  c.in_body = true;
  c.body = header.payload_length >= kPooledFromBytes ? buffers_->take(header.payload_length)
                                                     : fresh_buffer(header.payload_length);
  c.body_have = 0;
  c.body_crc = 0;
  return true;
}

bool EpollTransport::body_arrived(InConnection& c, std::size_t count) {
  if (options_.payload_crc)
    c.body_crc =
        payload_crc32_extend(c.body_crc, std::span<const std::byte>(c.body->data() + c.body_have, count));
  c.body_have += count;
  return c.body_have < c.header.payload_length || end_of_body(c);
}

bool EpollTransport::end_of_body(InConnection& c) {
  if (!c.shape.crc_trailer) return deliver(c);
  c.in_body = false;
  c.in_trailer = true;
  c.trailer_have = 0;
  return true;
}

bool EpollTransport::deliver(InConnection& c) {
  Message message;
  message.header = c.header;
  if (c.shape.phantom) {
    if (c.header.payload_crc != 0) {
      report_in(c, "payload_crc", "phantom frame must have CRC 0");
      return false;
    }
    message.payload = Payload::phantom(c.header.payload_length);
  } else {
    const std::uint32_t expected = c.shape.crc_trailer ? decode_crc_trailer(c.trailer) : c.header.payload_crc;
    // Without a body (length 0) the CRC is that of nothing, 0.
    if (options_.payload_crc && c.body_crc != expected) {
      report_in(c, "payload_crc",
                std::string(c.shape.crc_trailer ? "trailer after the payload" : "header") + " says " +
                    std::to_string(expected) + ", payload of key " + std::to_string(c.header.key) + " (" +
                    std::to_string(c.header.payload_length) + " bytes) gives " + std::to_string(c.body_crc));
      return false;
    }
    if (c.body) message.payload = Payload::adopt(std::move(c.body));
  }
  c.body.reset();
  c.in_body = false;
  c.in_trailer = false;
  c.body_have = 0;
  c.body_crc = 0;
  if (callbacks_.on_message && !std::exchange(c.discard, false)) callbacks_.on_message(std::move(message));
  return true;
}

bool EpollTransport::consume(InConnection& c, std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    if (c.in_trailer) {
      if (fill_field(c.trailer, c.trailer_have, bytes) && !deliver(c)) return false;
      continue;
    }
    if (!c.in_body) {
      if (fill_field(c.header_bytes, c.header_have, bytes) && !finish_header(c)) return false;
      continue;
    }
    const std::uint64_t want = c.header.payload_length - c.body_have;
    const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(bytes.size(), want));
    std::memcpy(c.body->data() + c.body_have, bytes.data(), take);
    bytes = bytes.subspan(take);
    if (!body_arrived(c, take)) return false;
  }
  return true;
}

bool EpollTransport::read_some(InConnection& c, bool hung_up) {
  if (options_.job_key && !c.trusted) {
    if (!read_proof(c)) return false;
    if (!c.trusted) return true;  // more proof bytes to come
  }
  if (c.buffer.empty()) c.buffer.resize(kInBufferBytes);
  std::uint64_t budget = options_.read_budget;
  // A peer that hung up is read to the end whatever its tokens: epoll reports EPOLLHUP even while
  // the socket is paused, and only reading finds out how the frame in progress ended.
  if (c.bucket && !hung_up) {
    // Shaped: read what the tokens allow, and sleep once fewer than half a burst is left.
    c.bucket->refill(seconds_now());
    if (c.bucket->available() < c.bucket->depth() / 2) {
      pause(c);
      return true;
    }
    budget = std::min(budget, c.bucket->available());
  }
  while (budget > 0) {
    std::array<iovec, 2> iov{};
    std::size_t count = 0;
    std::size_t direct = 0;
    if (c.in_body && c.header.payload_length - c.body_have >= kDirectReadBytes) {
      direct = static_cast<std::size_t>(
          std::min<std::uint64_t>(c.header.payload_length - c.body_have, std::max<std::uint64_t>(budget, 1)));
      iov[count++] = {c.body->data() + c.body_have, direct};
    }
    // A shaped read never takes more than its tokens; an unshaped one may overshoot the budget by the
    // staging buffer.
    const std::size_t staging =
        c.bucket ? static_cast<std::size_t>(std::min<std::uint64_t>(c.buffer.size(), budget - direct))
                 : c.buffer.size();
    if (staging > 0) iov[count++] = {c.buffer.data(), staging};
    const ssize_t got = ::readv(c.fd.get(), iov.data(), static_cast<int>(count));
    if (got < 0) {
      const auto drained = after_failed_read(c);
      if (!drained) continue;
      return *drained;
    }
    if (got == 0) {
      if (c.mid_frame()) {
        const std::string where = c.in_trailer
                                      ? "after the payload of key " + std::to_string(c.header.key) + ", " +
                                            std::to_string(c.trailer_have) + " of the 4 bytes of its CRC"
                                  : c.in_body ? "after " + std::to_string(c.body_have) + " of " +
                                                    std::to_string(c.header.payload_length) +
                                                    " payload bytes of key " + std::to_string(c.header.key)
                                              : "after " + std::to_string(c.header_have) + " of " +
                                                    std::to_string(kHeaderBytes) + " header bytes";
        report_lost_in(c, "peer closed the connection mid-frame, " + where);
      }
      return false;
    }
    auto n = static_cast<std::size_t>(got);
    budget -= std::min<std::uint64_t>(budget, n);
    if (c.bucket) c.bucket->take(n);
    const std::size_t into_body = std::min(n, direct);
    if (into_body > 0 && !body_arrived(c, into_body)) return false;
    if (n > into_body && !consume(c, std::span<const std::byte>(c.buffer.data(), n - into_body)))
      return false;
    if (n < direct + staging) return true;  // drained what the socket had
  }
  return true;  // budget spent: level-triggered epoll brings us back after the others had a turn
}

void EpollTransport::take_up_receive_shaping() {
  if (shaping_version_.load() == shaping_taken_) return;
  shaping_taken_ = shaping_version_.load();
  for (auto& [fd, connection] : in_) shape(*connection);
}

void EpollTransport::shape(InConnection& c) {
  double rate = 0;
  if (c.sender != kNoNode) {
    std::lock_guard lock(shaping_mutex_);
    rate = receive_shaper_.rate(c.sender);
  }
  if (rate <= 0) {
    c.bucket.reset();
    c.paused_until = std::min(c.paused_until, seconds_now());  // unshaped: resume_due() re-arms it now
    return;
  }
  if (c.bucket && c.bucket->rate() == rate) return;
  c.bucket.emplace(rate, std::max(fpt::kReaderBurstMinBytes, rate * fpt::kReaderBurstSeconds), seconds_now());
}

void EpollTransport::pause(InConnection& c) {
  if (c.paused_until <= 0) ++paused_;
  epoll_event event{};
  event.events = 0;  // EPOLLERR and EPOLLHUP still come; the rest waits for resume_due()
  event.data.fd = c.fd.get();
  epoll_ctl(receive_epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &event);
  c.paused_until = seconds_now() + c.bucket->seconds_until(static_cast<std::uint64_t>(c.bucket->depth() / 2));
}

void EpollTransport::resume_due() {
  if (paused_ == 0) return;  // the common case: nothing shaped, nothing to scan
  const double now = seconds_now();
  for (auto& [fd, c] : in_) {
    if (c->paused_until <= 0 || c->paused_until > now) continue;
    c->paused_until = 0;
    --paused_;
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.fd = fd;
    epoll_ctl(receive_epoll_.get(), EPOLL_CTL_MOD, fd, &event);
  }
}

int EpollTransport::shaped_timeout(int timeout_ms) const {
  if (paused_ == 0) return timeout_ms;
  double earliest = 0;
  for (const auto& [fd, c] : in_)
    if (c->paused_until > 0 && (earliest == 0 || c->paused_until < earliest)) earliest = c->paused_until;
  if (earliest == 0) return timeout_ms;
  const int until = static_cast<int>(std::ceil(std::max(0.0, earliest - seconds_now()) * 1000));
  return timeout_ms < 0 ? until : std::min(timeout_ms, until);
}

void EpollTransport::receive_loop() {
  std::array<epoll_event, kMaxEvents> events{};
  for (;;) {
    take_up_receive_shaping();
    resume_due();
    expire_unproven();
    const int ready =
        epoll_wait(receive_epoll_.get(), events.data(), kMaxEvents, unproven_timeout(shaped_timeout(-1)));
    if (ready < 0 && errno != EINTR) {
      report("node " + std::to_string(self_.load()), "connection", "epoll_wait failed: " + errno_text(errno));
      return;
    }
    for (int i = 0; i < ready; ++i) {
      const auto& event = events[static_cast<std::size_t>(i)];
      if (event.data.fd == stop_fd_.get()) return;
      on_readable(event.data.fd, (event.events & (EPOLLHUP | EPOLLERR)) != 0);
    }
  }
}

void EpollTransport::on_readable(int fd, bool hung_up) {
  if (fd == listen_fd_.get()) {
    accept_all();
    return;
  }
  const auto it = in_.find(fd);
  if (it == in_.end()) return;
  if (!read_some(*it->second, hung_up)) {
    close_in(fd);
    return;
  }
  set_wake_threshold(*it->second);
}

void EpollTransport::set_wake_threshold(InConnection& c) {
  // Never more than the rest of the frame in progress: those bytes are sure to come (the sender
  // writes a message whole), so the socket becomes readable; a peer that closes wakes it anyway. A
  // shaped connection reads what its tokens allow and keeps the kernel's default (1 byte).
  std::uint64_t want = 1;
  if (c.in_body && !c.bucket)
    want = std::min<std::uint64_t>(c.header.payload_length - c.body_have, kWakeBytes);
  if (want == c.wake_bytes) return;
  c.wake_bytes = want;
  set_int_option(c.fd.get(), SOL_SOCKET, SO_RCVLOWAT, static_cast<int>(want));
}

}  // namespace pstwin::realnet
