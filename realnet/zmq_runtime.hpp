// The real-network backend over ZeroMQ: one ZmqNodeRuntime per protocol node, talking ZeroMQ over
// TCP. Threads per node: the event loop of LoopRuntime, which owns protocol state and every ZeroMQ
// socket of the node (it sleeps in poll(2) on its ROUTER and an eventfd), ZeroMQ's own I/O thread,
// and one thread per executor lane.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "realnet/job_auth.hpp"
#include "realnet/loop_runtime.hpp"

namespace pstwin::realnet {

class ZmqNodeRuntime final : public LoopRuntime {
 public:
  // Binds the node's ROUTER socket before returning; throws BindError if it cannot.
  ZmqNodeRuntime(LocalHost& host, Options options);
  ~ZmqNodeRuntime() override;

  // The load balancer's weights: with a NIC rate (PSTWIN_NIC_RATE), peers lighter than the heaviest
  // are paced to their share a message at a time (fpt::MessagePacer), as the epoll van does.
  void set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) override;

  std::uint64_t rejected_frames() const { return rejected_.load(); }
  // Payload bytes received into a copy rather than adopted in place (small, misaligned frames).
  std::uint64_t received_bytes_copied() const { return received_bytes_copied_.load(); }

 private:
  class Sockets;  // the event loop's ZeroMQ sockets (zmq types stay out of this header)
  void bind_peer(NodeId id, const std::string& address) override;
  void queue(Message message) override;
  void receive() override;
  void flush() override;
  void wait(long timeout_ms) override;
  void wake() override;

  std::atomic<std::uint64_t> rejected_ = 0;
  std::atomic<std::uint64_t> received_bytes_copied_ = 0;
  std::unique_ptr<Sockets> sockets_;
};

// A bare ZeroMQ DEALER connected to one node's ROUTER, for tests and fuzzing tools: sends multipart
// messages of raw frames and receives single frames (a membership challenge) back. With `curve`, it
// is a CURVE client presenting that key pair and expecting it as the server's (an encrypted job's
// keys, or another job's).
class RawDealer {
 public:
  explicit RawDealer(std::string_view address, const std::optional<CurveKeyPair>& curve = std::nullopt);
  ~RawDealer();
  RawDealer(const RawDealer&) = delete;
  RawDealer& operator=(const RawDealer&) = delete;
  void send(const std::vector<std::string>& frames);
  // The first frame of the next message, or nullopt after `timeout_ms`.
  std::optional<std::string> receive(int timeout_ms);

 private:
  struct Sockets;
  std::unique_ptr<Sockets> sockets_;
};

// Sends one multipart message of raw frames to the ROUTER at `address` ("127.0.0.1:PORT") from a
// fresh DEALER, waiting up to `linger_ms` for it to leave. For tests and fuzzing tools.
void send_raw(std::string_view address, const std::vector<std::string>& frames, int linger_ms = 2000);

}  // namespace pstwin::realnet
