#include "realnet/zmq_runtime.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <future>
#include <iostream>
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
      staging_(options_.staging ? options_.staging : std::make_shared<SharedStaging>()) {}

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
  if (!options_.trace) return;
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
  {
    std::lock_guard lock(target.mutex);
    target.tasks.push_back({std::string(label), cost, std::move(work), std::move(done)});
  }
  target.ready.notify_one();
}

void ThreadExecutor::run_lane(Lane& lane, std::stop_token stop) {
  while (true) {
    Task task;
    {
      std::unique_lock lock(lane.mutex);
      if (!lane.ready.wait(lock, stop, [&] { return !lane.tasks.empty(); })) return;
      task = std::move(lane.tasks.front());
      lane.tasks.pop_front();
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
  }
}

// ---------------------------------------------------------------- ZmqNodeRuntime::Io

// Every ZeroMQ socket of the node lives on this one thread. Other threads queue connects and
// messages under `mutex_` and signal the eventfd, which the thread polls next to its ROUTER.
class ZmqNodeRuntime::Io {
 public:
  explicit Io(ZmqNodeRuntime& owner) : owner_(owner) {
    std::promise<std::string> bound;
    auto address = bound.get_future();
    thread_ = std::jthread([this, &bound] { run(bound); });
    static_cast<void>(address.get());  // waits for the bind; rethrows its failure
  }
  ~Io() {
    {
      std::lock_guard lock(mutex_);
      exit_ = true;
    }
    wake_.signal();
    thread_.join();  // closes every socket before context_ goes
  }
  Io(const Io&) = delete;
  Io& operator=(const Io&) = delete;

  const std::string& address() const { return address_; }

  void connect(NodeId id, std::string address) {
    {
      std::lock_guard lock(mutex_);
      connects_.emplace_back(id, std::move(address));
    }
    wake_.signal();
  }

  void send(Message message) {
    {
      std::lock_guard lock(mutex_);
      auto key = send_order_key(message);
      outgoing_[message.header.recipient].emplace(key, std::move(message));
    }
    wake_.signal();
  }

 private:
  void run(std::promise<std::string>& bound) {
    std::map<std::string, zmq::socket_t> dealers;  // one per peer address
    std::map<NodeId, zmq::socket_t*> routes;
    bool delivered = false;  // `bound` lives only until the constructor has the address
    try {
      zmq::socket_t router(context_, zmq::socket_type::router);
      router.set(zmq::sockopt::linger, 0);
      router.set(zmq::sockopt::rcvhwm, 0);  // never drop or block: the protocol bounds its own traffic
      router.set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(limits_.max_payload_bytes));
      try {
        router.bind("tcp://" + owner_.options_.bind);
      } catch (const zmq::error_t& e) {
        throw BindError("cannot bind " + owner_.options_.bind + ": " + e.what());
      }
      std::string endpoint = router.get(zmq::sockopt::last_endpoint);
      constexpr std::string_view kScheme = "tcp://";
      if (endpoint.starts_with(kScheme)) endpoint.erase(0, kScheme.size());
      address_ = endpoint;  // before set_value, which publishes it to the constructor
      bound.set_value(endpoint);
      delivered = true;

      std::array<zmq::pollitem_t, 2> items{};
      while (true) {
        items[0] = {router.handle(), 0, ZMQ_POLLIN, 0};
        items[1] = {nullptr, wake_.fd(), ZMQ_POLLIN, 0};
        try {
          zmq::poll(items.data(), items.size(), std::chrono::milliseconds{-1});
        } catch (const zmq::error_t& e) {
          if (e.num() != EINTR) throw;
          continue;  // a signal interrupted the wait
        }
        if ((items[1].revents & ZMQ_POLLIN) != 0) wake_.drain();

        bool exit = false;
        std::vector<std::pair<NodeId, std::string>> connects;
        std::map<NodeId, std::map<SendOrderKey, Message>> outgoing;
        {
          std::lock_guard lock(mutex_);
          exit = exit_;
          connects.swap(connects_);
          outgoing.swap(outgoing_);
        }
        if (exit && owner_.options_.linger_ms <= 0) return;
        for (auto& [id, address] : connects) {
          auto it = dealers.find(address);
          if (it == dealers.end()) {
            zmq::socket_t dealer(context_, zmq::socket_type::dealer);
            // The receiver's ROUTER names this connection by our address.
            dealer.set(zmq::sockopt::routing_id, address_);
            dealer.set(zmq::sockopt::linger, std::max(owner_.options_.linger_ms, 0));
            dealer.set(zmq::sockopt::sndhwm, 0);
            dealer.connect("tcp://" + address);
            it = dealers.emplace(address, std::move(dealer)).first;
          }
          routes[id] = &it->second;
        }
        for (auto& [to, queue] : outgoing) {
          auto route = routes.find(to);
          if (route == routes.end()) {
            owner_.log("dropped " + std::to_string(queue.size()) + " message(s) to node " +
                       std::to_string(to) + ": no socket for it");
            continue;
          }
          for (auto& [key, message] : queue) transmit(*route->second, std::move(message));
        }
        if (exit) return;  // lingering: what was queued is now with ZeroMQ, which flushes it on close
        if ((items[0].revents & ZMQ_POLLIN) != 0) receive_all(router);
      }
    } catch (const std::exception& e) {
      if (!delivered)
        bound.set_exception(std::current_exception());  // the constructor rethrows it
      else
        owner_.fail(std::string("I/O thread: ") + e.what());
    }
  }

  void transmit(zmq::socket_t& socket, Message message) {
    // A zero-copy view is read now, at transmission, as the simulator does.
    message.payload = message.payload.frozen();
    const HeaderBytes header = encode_header(message.header, message.payload, /*compute_crc=*/true);
    const bool body = !message.payload.is_phantom() && !message.payload.empty();
    socket.send(zmq::message_t(header.data(), header.size()),
                body ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (body) {
      const auto bytes = message.payload.bytes();
      socket.send(zmq::message_t(bytes.data(), bytes.size()), zmq::send_flags::none);
    }
    owner_.host_.count_message(kHeaderBytes + message.payload.size());
  }

  void receive_all(zmq::socket_t& router) {
    while (true) {
      std::vector<zmq::message_t> parts;
      const auto received = zmq::recv_multipart(router, std::back_inserter(parts), zmq::recv_flags::dontwait);
      if (!received) return;
      handle(parts);
    }
  }

  // Validates one multipart message [routing id, header, payload?] and delivers it, or rejects it
  // with a log line naming the field at fault. Never trusts a length before checking it.
  void handle(std::vector<zmq::message_t>& parts) {
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
      // v0 copies; adopting the zmq::message_t's storage would make the receive zero-copy.
      message.payload = Payload::copy_of(body);
    }
    owner_.deliver(std::move(message));
  }

  ZmqNodeRuntime& owner_;
  const DecodeLimits limits_{};
  zmq::context_t context_{1};
  EventFd wake_;
  std::mutex mutex_;
  bool exit_ = false;
  std::vector<std::pair<NodeId, std::string>> connects_;
  std::map<NodeId, std::map<SendOrderKey, Message>> outgoing_;
  std::string address_;
  std::jthread thread_;  // last: joined (explicitly) before the members it uses go
};

// ---------------------------------------------------------------- ZmqNodeRuntime

ZmqNodeRuntime::ZmqNodeRuntime(LocalHost& host, Options options)
    : host_(host),
      options_(std::move(options)),
      host_name_(this_host_name()),
      io_(std::make_unique<Io>(*this)) {
  address_ = io_->address();
}

ZmqNodeRuntime::~ZmqNodeRuntime() {
  halt();
  {
    std::lock_guard lock(executors_mutex_);
    executors_.clear();  // lanes may still run `work` on protocol data: join them first
  }
  io_.reset();
  protocol_.reset();
}

void ZmqNodeRuntime::start() {
  loop_ = std::jthread([this] { run_loop(); });
}

void ZmqNodeRuntime::halt() {
  {
    std::lock_guard lock(mutex_);
    halt_ = true;
  }
  wake_.notify_all();
  if (loop_.joinable()) loop_.join();
}

void ZmqNodeRuntime::run_loop() {
  try {
    protocol_->start();
    std::unique_lock lock(mutex_);
    while (!halt_) {
      if (!events_.empty()) {
        auto event = std::move(events_.front());
        events_.pop_front();
        lock.unlock();  // handlers call back into send/start_timer, which lock
        event();
        lock.lock();
        continue;
      }
      if (timers_.empty()) {
        wake_.wait(lock);
        continue;
      }
      if (auto fire = timers_.pop_due(now())) {
        lock.unlock();
        (*fire)();
        lock.lock();
        continue;
      }
      const Seconds left = timers_.next_deadline() - now();
      wake_.wait_for(
          lock, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(left)));
    }
  } catch (const std::exception& e) {
    fail(std::string("uncaught exception: ") + e.what());
  }
}

void ZmqNodeRuntime::post(std::function<void()> event) {
  if (!event) return;
  {
    std::lock_guard lock(mutex_);
    if (halt_) return;  // the loop is gone; nothing will run it
    events_.push_back(std::move(event));
  }
  wake_.notify_one();
}

void ZmqNodeRuntime::deliver(Message message) {
  post([this, message = std::move(message)]() mutable { protocol_->on_message(std::move(message)); });
}

void ZmqNodeRuntime::connect(NodeId id, std::string_view address) {
  peers_[id] = std::string(address);
  io_->connect(id, std::string(address));
}

void ZmqNodeRuntime::send(Message message) {
  const NodeId to = message.header.recipient;
  if (!peers_.contains(to)) {
    fail(options_.label + " has no connection to node " + std::to_string(to) + " (no address known for it)");
    return;
  }
  message.header.sender = self_;
  message.header.sequence = next_sequence_++;
  io_->send(std::move(message));
}

TimerId ZmqNodeRuntime::start_timer(Seconds delay, std::function<void()> fire) {
  std::lock_guard lock(mutex_);
  const TimerId id = timers_.add(now() + delay, std::move(fire));
  wake_.notify_one();
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
  host_.record_span({options_.label, options_.pid, std::string(lane), std::string(category),
                     std::string(name), start, end});
}

void ZmqNodeRuntime::log(std::string_view text) {
  std::ostringstream line;
  line << "[" << now() << " s] " << options_.label << ": " << text;
  host_.log_line(line.str());
}

void ZmqNodeRuntime::mark_stopped() {
  {
    std::lock_guard lock(mutex_);
    halt_ = true;
  }
  wake_.notify_all();
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
