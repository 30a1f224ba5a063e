#include "realnet/zmq_runtime.hpp"

#include <malloc.h>
#include <poll.h>
#include <sys/eventfd.h>
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

namespace pstwin::realnet {

namespace {

std::string printable(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

std::string this_host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "localhost";
  return name.data();
}

// Owns an eventfd: the wakeup other threads use to hand work to the I/O thread.
class EventFd {
 public:
  EventFd() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  }
  ~EventFd() { close(fd_); }
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;
  int fd() const { return fd_; }
  void signal() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = write(fd_, &one, sizeof one);  // counter saturation is harmless
  }
  void drain() const {
    std::uint64_t value = 0;
    [[maybe_unused]] const auto n = read(fd_, &value, sizeof value);
  }

 private:
  int fd_;
};

// Message buffers of megabytes are allocated on one thread (a worker's loop, ZeroMQ's I/O thread,
// an engine lane) and freed on another. With glibc's defaults each is mmap'ed and unmapped, or lands
// in a per-thread arena whose heap is trimmed or deleted when it empties, so every new buffer
// page-faults its memory in again: measured on loopback, that cost more CPU than moving the bytes.
// One arena, no mmap below 32 MiB and no trimming below 1 GiB keep freed buffers for reuse.
void keep_freed_buffers_for_reuse() {
  static const bool done = [] {
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    return true;
  }();
  static_cast<void>(done);
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

// ---------------------------------------------------------------- SharedStaging

std::shared_ptr<ByteBuffer> SharedStaging::open(std::string_view name, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  auto it = regions_.find(name);
  if (it == regions_.end() || it->second->size() != bytes)
    it = regions_.insert_or_assign(std::string(name), std::make_shared<ByteBuffer>(bytes)).first;
  return it->second;
}

// ---------------------------------------------------------------- LocalHost

LocalHost::LocalHost(Options options)
    : options_(std::move(options)),
      staging_(options_.staging ? options_.staging : std::make_shared<SharedStaging>()) {
  keep_freed_buffers_for_reuse();
}

Seconds LocalHost::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

void LocalHost::node_stopped() {
  std::lock_guard lock(mutex_);
  ++stopped_;
  last_stop_ = now();
  changed_.notify_all();
}

void LocalHost::fail(const std::string& who, const std::string& text) {
  std::lock_guard lock(mutex_);
  if (failure_.empty()) failure_ = who + ": " + text;
  changed_.notify_all();
}

double LocalHost::epoch_s() const {
  return std::chrono::duration<double>(epoch_.time_since_epoch()).count();
}

bool LocalHost::wait_all_stopped(int nodes, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  changed_.wait_until(lock, deadline, [&] { return stopped_ >= nodes || !failure_.empty(); });
  return stopped_ >= nodes;
}

bool LocalHost::failed() const {
  std::lock_guard lock(mutex_);
  return !failure_.empty();
}

std::string LocalHost::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

Seconds LocalHost::last_stop() const {
  std::lock_guard lock(mutex_);
  return last_stop_;
}

void LocalHost::record_span(TraceSpan span) {
  if (!tracing()) return;
  std::lock_guard lock(mutex_);
  if (trace_.size() >= options_.trace_max_events) {
    ++trace_dropped_;
    return;
  }
  trace_.push_back(std::move(span));
}

void LocalHost::count_message(std::uint64_t wire_bytes) {
  std::lock_guard lock(mutex_);
  ++messages_;
  message_bytes_ += wire_bytes;
}

void LocalHost::log_line(const std::string& line) {
  std::lock_guard lock(mutex_);
  if (options_.log_sink)
    options_.log_sink(line);
  else
    std::cerr << line + "\n";
}

void LocalHost::fill(RunReport& report) const {
  std::lock_guard lock(mutex_);
  report.messages = messages_;
  report.message_bytes = message_bytes_;
  report.trace = trace_;
  report.trace_dropped = trace_dropped_;
}

// ---------------------------------------------------------------- ThreadExecutor

ThreadExecutor::ThreadExecutor(ZmqNodeRuntime& node, std::string name, int lanes)
    : node_(node), name_(std::move(name)) {
  for (int i = 0; i < std::max(lanes, 1); ++i) {
    auto lane = std::make_unique<Lane>();
    lane->name = lanes == 1 ? name_ : name_ + "." + std::to_string(i);
    Lane* raw = lane.get();
    lane->thread = std::jthread([this, raw](std::stop_token stop) { run_lane(*raw, std::move(stop)); });
    lanes_.push_back(std::move(lane));
  }
}

ThreadExecutor::~ThreadExecutor() {
  // Ask every lane first so they wind down together; each jthread joins as its Lane goes.
  for (auto& lane : lanes_) lane->thread.request_stop();
}

void ThreadExecutor::submit(int lane, std::string_view label, ComputeCost cost, std::function<void()> work,
                            std::function<void()> done) {
  auto& target = *lanes_.at(static_cast<std::size_t>(lane) % lanes_.size());
  const bool nothing_to_do = cost.seconds <= 0 && cost.flops <= 0 && !work;
  {
    std::lock_guard lock(target.mutex);
    if (!nothing_to_do || target.busy || !target.tasks.empty()) {
      target.tasks.push_back({std::string(label), cost, std::move(work), std::move(done)});
      target.ready.notify_one();
      return;
    }
  }
  // Every earlier task of this lane has posted its `done`: posting this one now keeps the order.
  const Seconds at = node_.now();
  node_.trace_lane(target.name, name_, label, at, at);
  node_.post(std::move(done));
}

void ThreadExecutor::run_lane(Lane& lane, std::stop_token stop) {
  while (true) {
    Task task;
    {
      std::unique_lock lock(lane.mutex);
      if (!lane.ready.wait(lock, stop, [&] { return !lane.tasks.empty(); })) return;
      task = std::move(lane.tasks.front());
      lane.tasks.pop_front();
      lane.busy = true;
    }
    const Seconds start = node_.now();
    // The modelled duration is slept (interruptibly, so shutdown is prompt). cost.flops is not
    // modelled in v0: real compute would run inside `work`.
    if (task.cost.seconds > 0) {
      std::unique_lock lock(lane.mutex);
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::duration<double>(task.cost.seconds));
      lane.ready.wait_until(lock, stop, until, [] { return false; });
      if (stop.stop_requested()) return;
    }
    if (task.work) task.work();
    node_.trace_lane(lane.name, name_, task.label, start, node_.now());
    node_.post(std::move(task.done));
    std::lock_guard lock(lane.mutex);
    lane.busy = false;
  }
}

// ---------------------------------------------------------------- ZmqNodeRuntime::Sockets

// Every ZeroMQ socket of the node: a ROUTER that receives from every peer and one DEALER per peer
// address. Bound by the constructor's thread, then used only by the event loop (ZeroMQ sockets may
// move between threads, never be shared), closed once the loop has ended.
class ZmqNodeRuntime::Sockets {
 public:
  explicit Sockets(ZmqNodeRuntime& owner) : owner_(owner) {
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::rcvhwm, 0);  // never drop or block: the protocol bounds its own traffic
    router_.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(limits_.max_payload_bytes));
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

  void connect(NodeId id, const std::string& address) {
    auto it = dealers_.find(address);
    if (it == dealers_.end()) {
      zmq::socket_t dealer(context_, zmq::socket_type::dealer);
      // The receiver's ROUTER names this connection by our address.
      dealer.set(zmq::sockopt::routing_id, address_);
      dealer.set(zmq::sockopt::linger, std::max(owner_.options_.linger_ms, 0));
      dealer.set(zmq::sockopt::sndhwm, 0);
      dealer.connect("tcp://" + address);
      it = dealers_.emplace(address, std::move(dealer)).first;
    }
    routes_[id] = &it->second;
  }

  // Queued per peer in the simulator's stream order; what one loop round queued leaves in flush().
  void queue(Message message) {
    auto key = send_order_key(message);
    outgoing_[message.header.recipient].emplace(key, std::move(message));
  }

  void flush() {
    for (auto& [to, queue] : outgoing_) {
      if (queue.empty()) continue;
      auto route = routes_.find(to);
      if (route == routes_.end()) {
        owner_.log("dropped " + std::to_string(queue.size()) + " message(s) to node " + std::to_string(to) +
                   ": no socket for it");
      } else {
        for (auto& [key, message] : queue) transmit(*route->second, std::move(message));
      }
      queue.clear();
    }
  }

  // Hands every complete message waiting on the ROUTER to the protocol, until the node halts.
  void receive_all() {
    if (!router_ready_) return;  // nothing new since the last failed recv
    router_ready_ = false;
    while (!owner_.halt_.load()) {
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
  void wait(long timeout_ms) {
    std::array<pollfd, 2> fds{pollfd{router_fd_, POLLIN, 0}, pollfd{wake_.fd(), POLLIN, 0}};
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::min<long>(timeout_ms, 1 << 30))) < 0) {
      if (errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
      router_ready_ = true;  // a signal interrupted the wait: look again
      return;
    }
    if ((fds[0].revents & POLLIN) != 0) router_ready_ = true;
    if ((fds[1].revents & POLLIN) != 0) wake_.drain();
  }

 private:
  static std::string span_name(const MessageHeader& header) {
    return std::string(command_name(header.command)) + (header.is_response ? " response" : "");
  }

  void transmit(zmq::socket_t& socket, Message message) {
    const Seconds start = owner_.now();
    // A zero-copy view is read now, at transmission, as the simulator does.
    message.payload = message.payload.frozen();
    const HeaderBytes header = encode_header(message.header, message.payload, /*compute_crc=*/true);
    const std::uint64_t wire_bytes = kHeaderBytes + message.payload.size();
    const bool body = !message.payload.is_phantom() && !message.payload.empty();
    socket.send(zmq::message_t(header.data(), header.size()),
                body ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (body) socket.send(zero_copy_frame(std::move(message.payload)), zmq::send_flags::none);
    owner_.host_.count_message(wire_bytes);
    if (owner_.host_.tracing())
      owner_.trace_lane("send->" + std::to_string(message.header.recipient), "send",
                        span_name(message.header), start, owner_.now());
  }

  // Validates one multipart message [routing id, header, payload?] and delivers it, or rejects it
  // with a log line naming the field at fault. Never trusts a length before checking it.
  void handle(std::vector<zmq::message_t>& parts, Seconds start) {
    const std::string from = parts.empty() ? "?" : printable(parts[0].to_string_view());
    auto reject = [&](std::string_view field, const std::string& detail) {
      ++owner_.rejected_;
      owner_.log("rejected a frame from " + from + ": " + std::string(field) + ": " + detail);
    };
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
    if (owner_.host_.tracing())
      owner_.trace_lane("recv<-" + std::to_string(message.header.sender), "receive",
                        span_name(message.header), start, owner_.now());
    owner_.protocol_->on_message(std::move(message));
  }

  ZmqNodeRuntime& owner_;
  const DecodeLimits limits_{};
  zmq::context_t context_{1};  // first: destroyed last, after every socket
  zmq::socket_t router_{context_, zmq::socket_type::router};
  std::map<std::string, zmq::socket_t> dealers_;  // one per peer address
  std::map<NodeId, zmq::socket_t*> routes_;
  std::map<NodeId, std::map<SendOrderKey, Message>> outgoing_;
  EventFd wake_;
  std::string address_;
  int router_fd_ = -1;
  bool router_ready_ = true;  // the ROUTER may hold messages: receive_all() must look
};

// ---------------------------------------------------------------- ZmqNodeRuntime

ZmqNodeRuntime::ZmqNodeRuntime(LocalHost& host, Options options)
    : host_(host),
      options_(std::move(options)),
      host_name_(this_host_name()),
      sockets_(std::make_unique<Sockets>(*this)) {
  address_ = sockets_->address();
}

ZmqNodeRuntime::~ZmqNodeRuntime() {
  halt();
  {
    std::lock_guard lock(executors_mutex_);
    executors_.clear();  // lanes may still run `work` on protocol data: join them first
  }
  sockets_.reset();  // with linger > 0, waits for what was handed to ZeroMQ to leave
  protocol_.reset();
}

void ZmqNodeRuntime::start() {
  loop_ = std::jthread([this] { run_loop(); });
}

void ZmqNodeRuntime::halt() {
  halt_.store(true);
  wake_loop();
  if (loop_.joinable()) loop_.join();
}

void ZmqNodeRuntime::wake_loop() {
  if (!wake_pending_.exchange(true)) sockets_->wake().signal();
}

void ZmqNodeRuntime::run_loop() {
  loop_id_.store(std::this_thread::get_id());
  try {
    protocol_->start();
    std::deque<std::function<void()>> batch;
    while (!halt_.load()) {
      {
        std::lock_guard lock(mutex_);
        batch.swap(events_);
      }
      for (auto& event : batch) {
        if (halt_.load()) break;
        event();
      }
      batch.clear();
      sockets_->receive_all();
      while (!halt_.load()) {
        std::optional<std::function<void()>> fire;
        {
          std::lock_guard lock(mutex_);
          fire = timers_.pop_due(now());
        }
        if (!fire) break;
        (*fire)();
      }
      sockets_->flush();
      if (halt_.load()) break;

      // Sleep in zmq_poll until a message, a post (eventfd) or the next timer. Clearing the flag
      // before looking at the queue means a post after the look signals the eventfd.
      wake_pending_.store(false);
      long timeout_ms = -1;
      {
        std::lock_guard lock(mutex_);
        if (!events_.empty())
          timeout_ms = 0;
        else if (!timers_.empty())
          timeout_ms = std::max(0L, static_cast<long>(std::ceil((timers_.next_deadline() - now()) * 1e3)));
      }
      sockets_->wait(timeout_ms);
    }
    sockets_->flush();  // what the last handler sent (a shutdown ack) still goes out
  } catch (const std::exception& e) {
    fail(std::string("uncaught exception: ") + e.what());
  }
}

void ZmqNodeRuntime::post(std::function<void()> event) {
  if (!event) return;
  {
    std::lock_guard lock(mutex_);
    if (halt_.load()) return;  // the loop is gone; nothing will run it
    events_.push_back(std::move(event));
  }
  if (!on_loop()) wake_loop();  // the loop itself looks at the queue before it sleeps
}

void ZmqNodeRuntime::connect(NodeId id, std::string_view address) {
  if (!on_loop()) {
    post([this, id, to = std::string(address)] { connect(id, to); });
    return;
  }
  peers_[id] = std::string(address);
  sockets_->connect(id, std::string(address));
}

void ZmqNodeRuntime::send(Message message) {
  if (!on_loop()) {  // sequence numbers and sockets belong to the loop
    post([this, message = std::move(message)]() mutable { send(std::move(message)); });
    return;
  }
  const NodeId to = message.header.recipient;
  if (!peers_.contains(to)) {
    fail(options_.label + " has no connection to node " + std::to_string(to) + " (no address known for it)");
    return;
  }
  message.header.sender = self_;
  message.header.sequence = next_sequence_++;
  sockets_->queue(std::move(message));
}

TimerId ZmqNodeRuntime::start_timer(Seconds delay, std::function<void()> fire) {
  TimerId id = 0;
  {
    std::lock_guard lock(mutex_);
    id = timers_.add(now() + delay, std::move(fire));
  }
  if (!on_loop()) wake_loop();
  return id;
}

void ZmqNodeRuntime::cancel_timer(TimerId id) {
  std::lock_guard lock(mutex_);
  timers_.cancel(id);
}

RandomStream& ZmqNodeRuntime::random(std::string_view purpose) {
  auto it = randoms_.find(purpose);
  if (it == randoms_.end())
    it =
        randoms_.emplace(std::string(purpose), RandomStream(options_.seed, purpose, fnv1a64(address_))).first;
  return it->second;
}

void ZmqNodeRuntime::compute(std::string_view label, ComputeCost cost, std::function<void()> done) {
  executor("compute", 1).submit(0, label, cost, {}, std::move(done));
}

Executor& ZmqNodeRuntime::executor(std::string_view name, int lanes) {
  std::lock_guard lock(executors_mutex_);
  auto it = executors_.find(name);
  if (it == executors_.end())
    it = executors_
             .emplace(std::string(name), std::make_unique<ThreadExecutor>(*this, std::string(name), lanes))
             .first;
  return *it->second;
}

void ZmqNodeRuntime::trace_span(std::string_view category, std::string_view name, Seconds start,
                                Seconds end) {
  trace_lane("main", category, name, start, end);
}

void ZmqNodeRuntime::trace_lane(std::string_view lane, std::string_view category, std::string_view name,
                                Seconds start, Seconds end) {
  if (!host_.tracing()) return;
  host_.record_span({options_.label, options_.pid, std::string(lane), std::string(category),
                     std::string(name), start, end});
}

void ZmqNodeRuntime::log(std::string_view text) {
  std::ostringstream line;
  line << "[" << now() << " s] " << options_.label << ": " << text;
  host_.log_line(line.str());
}

void ZmqNodeRuntime::mark_stopped() {
  halt_.store(true);
  if (!on_loop()) wake_loop();
  if (!stopped_flag_.exchange(true)) host_.node_stopped();
}

void ZmqNodeRuntime::stop() {
  mark_stopped();
}

void ZmqNodeRuntime::fail(std::string text) {
  host_.fail(options_.label, text);
  mark_stopped();
}

std::string ZmqNodeRuntime::describe() const {
  return options_.label + ": " +
         (stopped_flag_.load() ? std::string("stopped")
          : protocol_          ? protocol_->describe_state()
                               : "not started");
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
