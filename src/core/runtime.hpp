// The only door between protocol code (src/ps, src/zeno, ...) and the world. Protocol code never
// creates threads, sleeps, reads a clock or draws randomness except through this interface, so the
// SimGrid backend (sim/) can control every interleaving and the real backend (realnet/) can run the
// same handlers on sockets and threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "core/message.hpp"
#include "core/payload.hpp"
#include "core/random.hpp"
#include "core/types.hpp"

namespace pstwin {

// Modelled cost of a piece of work: a duration, a FLOP count (run on the host's cores), or both.
// `device_seconds` is the modelled time of device work that `work` really does in the real backend (a
// copy between GPU and host): the simulator charges it like `seconds`, the real backend does not sleep
// it, since the real copy takes its own time, and never runs such a task on the event loop.
struct ComputeCost {
  Seconds seconds = 0;
  double flops = 0;
  Seconds device_seconds = 0;
};

// What a traced step worked on, written as its span's args in trace.json, so a trace shows which
// worker's copy of which key and staging buffer overlapped which push (the crossed-line race).
struct SpanTags {
  std::uint64_t key = 0;
  std::uint32_t iteration = 0;
  int worker = -1;     // the rank of the worker whose push this is; -1: no one worker's
  std::string buffer;  // the staging buffer's name; "": none
  std::uint64_t bytes = 0;
};

// Work that real systems do on other threads: server engine threads, a worker's copy and push
// stages, shared-memory staging. Tasks on one lane run one at a time in submission order; lanes run
// concurrently. `work` runs on the lane after the modelled cost; `done` then runs back on the node's
// event loop, so protocol state is only touched there (or inside `work` for data the lane owns).
class Executor {
 public:
  // One submitted task, as both backends' lanes queue it.
  struct Task {
    std::string label;
    ComputeCost cost;
    std::function<void()> work;
    std::function<void()> done;
    std::optional<SpanTags> tags = std::nullopt;
  };
  virtual ~Executor() = default;
  virtual int lanes() const = 0;
  virtual void submit(int lane, std::string_view label, ComputeCost cost, std::function<void()> work,
                      std::function<void()> done) = 0;
  // submit, with what the step works on for its trace span. A backend that does not record tags drops them.
  virtual void submit_tagged(int lane, std::string_view label, ComputeCost cost, std::function<void()> work,
                             std::function<void()> done, SpanTags /*tags*/) {
    submit(lane, label, cost, std::move(work), std::move(done));
  }
};

// Host-local shared memory between co-located processes (BytePS stages tensors in /dev/shm).
// Opening the same name on the same host yields the same region.
class StagingArea {
 public:
  virtual ~StagingArea() = default;
  virtual std::shared_ptr<ByteBuffer> open(std::string_view name, std::size_t bytes) = 0;
};

using TimerId = std::uint64_t;

class Runtime {
 public:
  virtual ~Runtime() = default;

  // This node's id once the scheduler assigned it (kNoNode before), and its transport address.
  virtual NodeId self() const = 0;
  virtual void set_self(NodeId id) = 0;
  virtual std::string local_address() const = 0;
  virtual std::string host_name() const = 0;

  // Binds a node id to a transport address (ps-lite's Van::Connect).
  virtual void connect(NodeId id, std::string_view address) = 0;
  // Sends to header.recipient over the ordered stream to that node. Sender and sequence are filled.
  virtual void send(Message message) = 0;
  // For a layer that resends (ps/resend.hpp), on the event loop: take this node's next sequence number
  // and send a message under the one the caller set, so a resend keeps the signature (sender,
  // sequence) its receiver deduplicates by. send() is the two together.
  virtual std::uint64_t next_sequence() = 0;
  virtual void send_numbered(Message message) = 0;
  // How this node's outgoing bytes should be shared among destinations from now on (ps.balancing =
  // "lb": in proportion to what the decision in force sends to each). A backend with a send pool makes
  // them its DRR weights (docs/FPT.md); `version` grows with every new table. Default: ignored.
  virtual void set_send_weights(std::uint64_t /*version*/, std::span<const PeerWeight> /*weights*/) {}
  // How the bulk bytes this node receives should be shared among the peers sending them (many-to-one:
  // in proportion to what the decision in force has each send us). A backend that can shape what it
  // receives holds lighter peers to their shares of its link (fpt::ReceiveShaper). An empty table
  // turns shaping off (the load balancer's probe state). Default: ignored.
  virtual void set_receive_weights(std::uint64_t /*version*/, std::span<const PeerWeight> /*weights*/) {}

  virtual Seconds now() const = 0;
  virtual TimerId start_timer(Seconds delay, std::function<void()> fire) = 0;
  virtual void cancel_timer(TimerId id) = 0;

  // A deterministic stream for one purpose ("worker.compute", "attack", ...), private to this node.
  virtual RandomStream& random(std::string_view purpose) = 0;

  virtual Executor& executor(std::string_view name, int lanes) = 0;
  virtual StagingArea& staging() = 0;

  // Observability: a span for trace.json, and diagnostics.
  virtual void trace_span(std::string_view category, std::string_view name, Seconds start, Seconds end) = 0;
  // A span on a lane of its own (trace_span's go on "main"), with what it worked on. A backend that
  // does not record tags traces it as trace_span.
  virtual void trace_tagged(std::string_view /*lane*/, std::string_view category, std::string_view name,
                            Seconds start, Seconds end, const SpanTags& /*tags*/) {
    trace_span(category, name, start, end);
  }
  virtual void log(std::string_view text) = 0;

  // The node finished cleanly / hit an unrecoverable error (the run fails with this text).
  virtual void stop() = 0;
  virtual void fail(std::string text) = 0;
  // fail() for a node whose configuration does not fit the job (the scheduler refused its
  // registration): `pstwin node` exits 2 for it, as for any bad configuration.
  virtual void fail_configuration(std::string text) { fail(std::move(text)); }
};

// A protocol role: event handlers driven by a Runtime.
class Node {
 public:
  virtual ~Node() = default;
  virtual void start() = 0;
  virtual void on_message(Message message) = 0;
  // One line on what the node is waiting for: printed when a run stalls.
  virtual std::string describe_state() const = 0;
  // The node is about to stop for `why` (its own fail(), a lost connection, a stop signal): its last
  // chance to tell its peers, on the event loop; what it sends here still leaves. The real backend
  // calls it once per node; the simulator, where one failure ends the whole run, does not.
  virtual void on_failing(std::string_view /*why*/) {}
};

}  // namespace pstwin
