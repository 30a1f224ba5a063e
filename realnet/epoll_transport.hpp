// FPT's TCP transport: one node's connections, moved by two threads.
//  - The receive thread waits in level-triggered epoll on the listening socket and every accepted
//    connection; each readable socket gets at most `read_budget` bytes per turn, so one busy peer
//    cannot starve the rest. Frames are the 64-byte header of core/codec.hpp, then the payload, read
//    straight into the message's own buffer (payloads of 16 KiB and more reuse released buffers:
//    realnet/buffer_pool.hpp) and checksummed read by read while in cache. While a large payload
//    comes in, its socket wakes the loop once 1 MiB more of it is there (SO_RCVLOWAT).
//  - The send thread drains an fpt::SendPool (control first, DRR across peers, priority then order
//    within a peer) and writes header + payload with one sendmsg per batch, never copying a payload.
//    A payload over 1 MiB goes with its CRC after it (codec.hpp's CRC trailer), checksummed and
//    written 256 KiB at a time, so that the kernel's copy reads each piece from cache.
//    It sleeps in epoll on an eventfd (woken by send()) and the sockets that are full.
// With Options::own_threads false there are no threads: the owner's thread (EpollNodeRuntime's
// event loop) drives both sides with poll() and pump(), so a message goes from the protocol to the
// socket and from the socket to the protocol with no thread hop.
// Connections are one-way: connect() opens ours to a peer's listener; frames name their sender.
// TCP_NOTSENT_LOWAT keeps the kernel's unsent queue short so the pool, not the kernel, decides what
// goes next; SO_SNDBUF/SO_RCVBUF are left alone (setting them turns off autotuning).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/codec.hpp"
#include "core/message.hpp"
#include "fpt/receive_shaper.hpp"
#include "fpt/send_pool.hpp"
#include "realnet/buffer_pool.hpp"
#include "realnet/file_descriptor.hpp"
#include "realnet/job_auth.hpp"

namespace pstwin::realnet {

// What went wrong on which connection: `peer` names it ("connection from 127.0.0.1:40112 (node 9)",
// "connection to node 3 at 127.0.0.1:5001"), `field` the header field at fault or "connection".
// `refused`: nothing of a member's was lost, so the node goes on: the connection never proved
// membership (it was closed), or one message of a member's was dropped (a forged sender, another
// node's frame) and its connection kept. `who` then names whom to count it against: "node 9", or
// the host ("127.0.0.1") of a connection that never proved membership.
// `lost`: a member's connection closed or was reset (its process died, or the network between us
// broke): what it carried in flight is gone, and nothing says whether the peer is dead. `lost_node`
// is the peer; to send to it again, forget() it and connect() anew. Whether the job can go on is for
// the protocol's heartbeats (and ps.resend) to decide, as with ZeroMQ, not for the transport.
struct TransportError {
  std::string peer;
  std::string field;
  std::string detail;
  bool refused = false;
  std::string who;
  bool lost = false;
  NodeId lost_node = kNoNode;  // with `lost`, when known
  std::string to_string() const { return peer + ": " + field + ": " + detail; }
};

class EpollTransport {
 public:
  struct Options {
    std::string bind_host = "127.0.0.1";  // numeric IPv4
    std::uint16_t port = 0;               // 0: any free port (see port())
    // TCP_NOTSENT_LOWAT of every outgoing connection. 1 MiB, not 128 KiB: a 1 MiB message then leaves
    // in one or two sendmsg calls instead of eight EAGAIN and EPOLLOUT rounds (10-15 % of the 1 MiB
    // loopback bench's CPU), and the pool already commits whole messages, so priorities are decided
    // per message either way (docs/PERFORMANCE.md, "Epoll van 1 MB").
    int notsent_lowat = 1 << 20;
    std::uint64_t read_budget = 1 << 20;  // bytes per readable socket per receive-loop turn
    bool payload_crc = true;              // CRC-32 of payloads, sent and checked (both ends must agree)
    // Idle receive buffers kept for reuse (payloads of 16 KiB and more; realnet/buffer_pool.hpp).
    std::uint64_t buffer_pool_bytes = 64ull << 20;
    DecodeLimits limits;
    fpt::SendPoolOptions pool;
    // Who holds a paced connection (the pool's pacing_rate) to its rate. kUser: this transport, a
    // message at a time: it writes the message whole and takes the connection out of the pool's
    // rotation for size / rate. kKernel: SO_MAX_PACING_RATE, which on Linux lets a message out at once
    // after idling and repays in bursts, so a light connection takes its share in clumps of messages
    // (docs/FPT.md, "Pacing: the van's or the kernel's").
    enum class Pacing { kUser, kKernel };
    Pacing pacing = Pacing::kUser;
    // false: start no thread; the owner calls poll(), pump() and drain() from one thread of its own,
    // and the callbacks run on it.
    bool own_threads = true;
    // The job's key (PSTWIN_JOB_TOKEN): an accepted connection must prove membership with it before
    // any of its bytes is read as a frame, and every connection we open proves it (job_auth.hpp).
    // nullopt: no handshake; a connection counts as a member from its first well-formed header.
    std::optional<JobKey> job_key;
    // Accepted connections still proving membership: past this many, new ones are closed at once;
    // each has handshake_timeout_s to prove it.
    std::size_t max_unproven = 256;
    double handshake_timeout_s = 5;
  };
  struct Callbacks {
    std::function<void(Message)> on_message;              // on the receive thread
    std::function<void(const TransportError&)> on_error;  // on either thread; the connection is closed
  };

  // Binds and listens, then starts both threads. Throws std::runtime_error naming the address on failure.
  EpollTransport(NodeId self, Options options, Callbacks callbacks);
  ~EpollTransport();
  EpollTransport(const EpollTransport&) = delete;
  EpollTransport& operator=(const EpollTransport&) = delete;

  std::uint16_t port() const { return port_; }
  NodeId self() const { return self_.load(); }
  // The id a scheduler assigned later (kNoNode until then: frames to any recipient are accepted).
  void set_self(NodeId id) { self_.store(id); }

  // Opens our connection to `peer` listening at host:port (blocking). An error names the field at
  // fault; `refused`, if given, tells whether nothing listened there (yet). `timeout_ms` >= 0 bounds
  // the wait: a peer whose host does not answer (down, or its listener's queue full) counts as refused
  // after that long, instead of holding the caller for the kernel's SYN retries (minutes).
  [[nodiscard]] std::optional<std::string> connect(NodeId peer, const std::string& host, std::uint16_t port,
                                                   bool* refused = nullptr, int timeout_ms = -1);

  // Queues `message` for `peer` (sender and recipient are filled in). Thread-safe. An error if the
  // peer was never connected, its connection was lost, or the transport stopped.
  [[nodiscard]] std::optional<std::string> send(NodeId peer, Message message);

  // Without own threads, on the owner's thread: closes our connection to `peer` (a lost one, see
  // TransportError::lost) and returns the messages still queued for it, in the order they would
  // have gone; connect() may then open a new one. Nothing if `peer` has no connection.
  std::vector<Message> forget(NodeId peer);

  // The kernel's pacing cap on our connection to `peer` (SO_MAX_PACING_RATE, bytes/s), as the socket
  // reports it: what the pool's pacing (Options::pool.link_rate_Bps > 0) asked for; nullopt if not
  // connected. std::numeric_limits<std::uint64_t>::max() means unpaced.
  std::optional<std::uint64_t> pacing_rate(NodeId peer) const;
  [[nodiscard]] std::optional<std::string> set_weights(std::uint64_t version,
                                                       std::span<const PeerWeight> weights);
  fpt::DestinationStats stats(NodeId peer) const;
  // Receive-side shaping (fpt::ReceiveShaper; the link rate is Options::pool.link_rate_Bps, the NIC's,
  // taken as the same both ways): from now on a connection from a peer the table names lighter than
  // its heaviest is read no faster than that peer's share of the link, and TCP's flow control holds the
  // sender to it. An empty table stops shaping. Thread-safe; the receive side takes it up on its next turn.
  [[nodiscard]] std::optional<std::string> set_receive_weights(std::uint64_t version,
                                                               std::span<const PeerWeight> weights);
  double receive_rate(NodeId sender) const;  // bytes/s the shaping holds `sender` to, 0 for none
  std::uint64_t reused_buffers() const { return buffers_->reused(); }

  // Without own threads: waits up to `timeout_ms` (-1: no limit, 0: not at all) for a readable
  // socket, a writable blocked one or wake(), and handles what is ready: frames are delivered to
  // on_message on this thread, blocked connections are written. Returns after one round.
  void poll(int timeout_ms);
  // Without own threads: moves what the pool releases onto the sockets until the pool is empty or
  // every destination with messages is blocked. send() does not do it: call it after sending.
  void pump();
  // Makes a poll() in progress (or the next one) return. Any thread.
  void wake();
  // Without own threads: pumps and polls until everything queued was written to the kernel or
  // `timeout_ms` passed; true if it all left. Frames that arrive meanwhile are still delivered.
  bool drain(int timeout_ms);
  // Without own threads, for an owner that waits on several transports at once (LoopPool): the epoll
  // set poll() waits on, readable while poll(0) has something to do; how long poll(timeout_ms) would
  // wait at most (the transport's own deadlines: shaping, pacing, handshakes); and `fd`, a timer of
  // the owner's, added to that set (drained by poll()).
  int poll_fd() const { return receive_epoll_.get(); }
  int poll_timeout(int timeout_ms) const;
  void watch(int fd);

  // Stops both threads, joins them and closes every socket; queued messages are dropped. Idempotent.
  void stop();

 private:
  struct OutConnection;
  struct InConnection;

  void send_loop();
  void receive_loop();
  // One round of the send side: takes a batch from the pool and writes it; false if the pool gave
  // nothing (empty, or every destination with messages blocked).
  bool send_batch();
  void on_writable(int fd);
  void on_readable(int fd, bool hung_up = false);  // hung_up: EPOLLHUP or EPOLLERR came with it
  int out_epoll() const { return options_.own_threads ? send_epoll_.get() : receive_epoll_.get(); }
  bool idle() const;
  void apply_pacing(OutConnection& connection);  // mutex_ held
  // User pacing (mutex_ held): a message of `bytes` just committed to `connection`, which is paced;
  // holds its data out of the pool's rotation (SendPool::set_paced) until its rate has paid for them.
  void pace(OutConnection& connection, std::uint64_t bytes, double now);
  void release_paced(double now);           // mutex_ held: connections whose hold is over go back
  int paced_timeout(int timeout_ms) const;  // cut short for the earliest paced release
  bool flush(OutConnection& connection);    // false: the connection failed (already reported)
  // The connection goes. `lost` (a member's connection closed or reset): its queued messages stay in
  // the pool, held, for forget(); otherwise they are dropped with it.
  void fail_out(OutConnection& connection, const std::string& detail, bool lost = false);
  void accept_all();
  // Out of file descriptors: one pending connection is accepted on the spare descriptor and closed
  // at once, so the listener does not stay readable and the node goes on.
  // False if no connection could be taken off the queue (no spare descriptor).
  bool refuse_for_lack_of_descriptors(int error);
  void close_in(int fd);
  void expire_unproven();  // closes connections past their handshake deadline
  void evict_oldest_unproven();
  int unproven_timeout(int timeout_ms) const;
  bool read_proof(InConnection& connection);  // false: closed (refused)
  // After a read failed: nullopt to try again (EINTR), true if the socket is drained, false once
  // the failure is reported (the connection goes).
  std::optional<bool> after_failed_read(const InConnection& connection);
  void answer_challenge(OutConnection& connection);
  void await_acceptance(OutConnection& connection);
  // The peer closed a connection before it accepted our proof: another is opened, for up to twice the
  // handshake timeout, then the connection fails.
  void retry_handshake(OutConnection& connection, const std::string& why);
  void report_in(const InConnection& connection, const std::string& field, const std::string& detail,
                 bool keep_connection = false);
  // A member's connection closed or reset under us: reported as `lost`; other connections as report_in.
  void report_lost_in(const InConnection& connection, const std::string& detail);
  bool read_some(InConnection& connection, bool hung_up);  // false: closed (reported if mid-frame or bad)
  bool consume(InConnection& connection, std::span<const std::byte> bytes);
  bool finish_header(InConnection& connection);
  // `count` more payload bytes are in place after body_have: counted and checksummed while the
  // kernel's copy left them in cache. False if that completed the frame and delivering it failed.
  bool body_arrived(InConnection& connection, std::size_t count);
  // The payload is all in: delivered, or its CRC trailer read next. False if delivering it failed.
  bool end_of_body(InConnection& connection);
  // After a read turn: how many bytes the socket waits for before it wakes us (SO_RCVLOWAT).
  void set_wake_threshold(InConnection& connection);
  bool deliver(InConnection& connection);
  // Receive shaping, receive side only: a new table's rates onto the connections; a connection out of
  // tokens stops being polled (pause) until its bucket holds enough again (resume_due); the epoll wait
  // is cut short for the earliest such resume.
  void take_up_receive_shaping();
  void shape(InConnection& connection);  // its sender's rate in force: a bucket, or none
  void pause(InConnection& connection);
  void resume_due();
  int shaped_timeout(int timeout_ms) const;
  void report(const std::string& peer, const std::string& field, const std::string& detail);

  std::atomic<NodeId> self_;
  const Options options_;
  const Callbacks callbacks_;
  FileDescriptor listen_fd_;
  FileDescriptor stop_fd_;  // eventfd, never drained: both loops see it once stop() wrote it
  FileDescriptor wake_fd_;  // eventfd for the send thread
  FileDescriptor send_epoll_;
  FileDescriptor receive_epoll_;
  int watched_fd_ = -1;      // watch()
  FileDescriptor spare_fd_;  // /dev/null, given up to accept (and close) a connection on EMFILE
  std::uint16_t port_ = 0;

  mutable std::mutex mutex_;  // guards pool_, out_ (the map), stopped_
  fpt::SendPool pool_;
  std::shared_ptr<BufferPool> buffers_;  // thread-safe; outlives us while payloads hold its buffers
  std::map<NodeId, std::unique_ptr<OutConnection>> out_;
  std::map<int, OutConnection*> out_by_fd_;  // the same connections, by socket
  bool stopped_ = false;
  std::size_t held_ = 0;  // user pacing: connections with held_until > 0 (guarded by mutex_)
  std::atomic<bool> wake_pending_{false};

  std::map<int, std::unique_ptr<InConnection>> in_;  // receive thread only, by fd
  std::size_t unproven_ = 0;                         // receive side: in_ still proving membership
  double next_expiry_check_ = 0;                     // receive side

  mutable std::mutex shaping_mutex_;  // guards receive_shaper_
  fpt::ReceiveShaper receive_shaper_;
  std::atomic<std::uint64_t> shaping_version_{0};  // the receive side compares it with the version it took up
  std::uint64_t shaping_taken_ = 0;                // receive side only
  std::size_t paused_ = 0;                         // receive side only: connections with paused_until > 0

  std::jthread send_thread_;
  std::jthread receive_thread_;
};

}  // namespace pstwin::realnet
