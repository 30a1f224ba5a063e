// The real-network backend over UCX (the "ucx" van: DMLC_PS_VAN_TYPE=ucx, DMLC_ENABLE_RDMA=1 or
// DMLC_ENABLE_UCX=1): one UcxNodeRuntime per protocol node, each with its own UCP context and one
// worker, which the node's event loop (LoopRuntime) drives: it progresses the worker, arms it and
// sleeps in poll(2) on the worker's event fd and its own wake-up fd (no busy polling). UCX picks the
// transports (UCX_TLS): shared memory (posix, sysv, cma) between processes of one host, TCP between
// hosts here, RDMA verbs on an RDMA fabric, with no change to this code.
//
// Connections: each node listens on its bound HOST:PORT (a UCP listener) and opens one client
// endpoint to each peer address it sends to (as the ZeroMQ van's DEALERs). The peer answers the
// accepted endpoint once, with a welcome: the link's id, a membership challenge when PSTWIN_JOB_TOKEN
// is set (realnet/job_auth.hpp), and its worker address. The connecting side then opens a second
// endpoint to that worker address, which UCX wires up over every transport the two share (shared
// memory on one host: UCX 1.13 gives a sockaddr endpoint the connection manager's device only), and
// sends on it first the link id and the proof (empty without a token), then the messages. Messages
// wait until then, so a peer that listens late is retried and loses nothing.
//
// A message is one UCP active message: its header is an 8-byte link sequence and the 64-byte wire
// header (core/codec.hpp), its data the payload. UCX sends small ones eagerly and large ones by its
// rendezvous protocol (zero-copy where the transport allows), which the receiver completes into a
// buffer of the announced size, after every header check passed. The link sequence restores the
// sender's order whatever order UCX completes them in. What a peer sends is checked as the other
// vans check it: a malformed, oversized, forged or misrouted message, or any message on a connection
// that has not proven membership, is refused and counted (refusals()) and the node goes on.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "realnet/loop_runtime.hpp"

namespace pstwin::realnet {

class UcxNodeRuntime final : public LoopRuntime {
 public:
  // Listens on the bound address before returning; throws BindError if it cannot.
  UcxNodeRuntime(LocalHost& host, Options options);
  ~UcxNodeRuntime() override;

  std::uint64_t rejected_frames() const { return rejected_.load(); }
  // The transports UCX_TLS leaves this node's context ("tcp/lo, posix/memory, ..."), as logged at start.
  const std::string& transports() const { return transports_; }
  // PSTWIN_NIC_RATE and the load balancer's table: lighter peers' data at their share (fpt::MessagePacer).
  void set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) override;

 private:
  class Worker;  // the UCP context, worker, listener and endpoints (UCX types stay out of this header)
  void bind_peer(NodeId id, const std::string& address) override;
  void queue(Message message) override;
  void receive() override;
  void flush() override;
  void wait(long timeout_ms) override;
  void wake() override;

  std::atomic<std::uint64_t> rejected_ = 0;
  std::string transports_;
  std::unique_ptr<Worker> worker_;
};

// A bare UCP client of one node's listener, for tests and fuzzing tools: sends active messages of
// raw bytes as a van would (active message ids below) and reads the welcome back.
class RawUcxClient {
 public:
  static constexpr unsigned kFrame = 1;  // header: [link sequence][wire header]; data: the payload
  static constexpr unsigned kProof = 2;  // header: [link sequence 0][link id]; data: the proof, or nothing
  static constexpr unsigned kWelcome =
      3;  // header: [link id][the challenge, or nothing]; data: worker address
  explicit RawUcxClient(std::string_view address);
  ~RawUcxClient();
  RawUcxClient(const RawUcxClient&) = delete;
  RawUcxClient& operator=(const RawUcxClient&) = delete;
  // The welcome's challenge (empty: none asked), or nullopt after `timeout_ms`.
  std::optional<std::string> welcome(int timeout_ms);
  // The first message a van sends on a link: the proof for the welcome's link (empty without a token).
  void send_proof(std::span<const std::byte> proof, std::uint64_t sequence = 0);
  // Sends one active message and waits up to 2 s for it to leave; `rendezvous` forces UCX's
  // rendezvous protocol, whatever the size.
  void send(unsigned id, std::span<const std::byte> header, std::span<const std::byte> data,
            bool rendezvous = false);
  // A van's frame: the link sequence, then `wire_header` (64 bytes, or anything, to test the checks).
  void send_frame(std::uint64_t sequence, std::span<const std::byte> wire_header,
                  std::span<const std::byte> data, bool rendezvous = false);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pstwin::realnet
