#include "realnet/ucx_runtime.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/codec.hpp"
#include "core/send_order.hpp"
#include "fpt/message_pacer.hpp"
#include "ps/ids.hpp"
#include "realnet/event_fd.hpp"
#include "realnet/host_port.hpp"
#include "realnet/job_auth.hpp"

namespace pstwin::realnet {

namespace {

constexpr std::size_t kSequenceBytes = 8;
constexpr std::size_t kFrameHeaderBytes = kSequenceBytes + kHeaderBytes;
// Membership handshakes (with a job token): at most this many accepted connections may be proving
// it at once, each for at most this long; the oldest beyond that is closed.
constexpr std::size_t kMaxUnproven = 256;
constexpr double kHandshakeTimeoutS = 5;
constexpr double kRetryConnectS = 0.02;  // a peer whose listener refused us is tried again this often
// How far ahead of the next expected message a link sequence may be: UCX completes a connection's
// messages nearly in order, and a member announcing more is broken (its connection is closed).
constexpr std::uint64_t kReorderWindow = 4096;
// How long closing waits for the endpoints to flush (each node's last messages have left by then).
constexpr double kCloseWaitS = 2;

std::uint64_t read_u64(std::span<const std::byte> bytes) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < kSequenceBytes; ++i)
    value |= std::to_integer<std::uint64_t>(bytes[i]) << (8 * i);
  return value;
}

void write_u64(std::span<std::byte> out, std::uint64_t value) {
  for (std::size_t i = 0; i < kSequenceBytes; ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
}

std::string status_text(ucs_status_t status) {
  return ucs_status_string(status);
}

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// HOST (a name or a numeric address) and PORT as a socket address; nullopt and `error` if unknown.
std::optional<SocketAddress> resolve(const std::string& host, std::uint16_t port, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    error = gai_strerror(rc);
    return std::nullopt;
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(found, &freeaddrinfo);
  SocketAddress out;
  std::memcpy(&out.storage, found->ai_addr, found->ai_addrlen);
  out.length = found->ai_addrlen;
  return out;
}

std::string host_text(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* where =
      address.ss_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&address)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&address)->sin_addr);
  if (inet_ntop(address.ss_family, where, text, sizeof text) == nullptr) return "unknown host";
  return text;
}

std::uint16_t port_of(const sockaddr_storage& address) {
  return ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port
                                             : reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

// What one of UCX's print_info functions writes, as text.
template <typename Print>
std::string printed(Print print) {
  char* buffer = nullptr;
  std::size_t size = 0;
  FILE* stream = open_memstream(&buffer, &size);
  if (stream == nullptr) return "";
  print(stream);
  std::fclose(stream);
  const std::unique_ptr<char, decltype(&std::free)> owner(buffer, &std::free);
  return std::string(buffer, size);
}

// "tcp/lo, posix/memory, ...": the transport/device names after each `marker` line of UCX's info.
std::string transport_names(const std::string& info, std::string_view marker, std::string_view skip) {
  std::vector<std::string> names;
  std::istringstream lines(info);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(marker) == std::string::npos) continue;
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      // "tcp/lo" in a resource line; "8:posix/memory.0" in an endpoint's lane line.
      const auto slash = word.find('/');
      if (slash == std::string::npos || slash == 0 || word.starts_with("md[")) continue;
      if (const auto colon = word.find(':'); colon != std::string::npos && colon < slash)
        word.erase(0, colon + 1);
      if ((!skip.empty() && word.starts_with(skip)) || std::ranges::find(names, word) != names.end()) break;
      names.push_back(word);
      break;
    }
  }
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// Whether `transports` ("tcp/lo, posix/memory, ...") holds one that is not shared memory.
bool has_network_transport(std::string_view transports) {
  std::size_t start = 0;
  while (start < transports.size()) {
    const auto end = std::min(transports.find(", ", start), transports.size());
    if (!transports.substr(start, end - start).ends_with("/memory")) return true;
    start = end + 2;
  }
  return false;
}

struct ContextDeleter {
  void operator()(ucp_context_h context) const { ucp_cleanup(context); }
};
struct WorkerDeleter {
  void operator()(ucp_worker_h worker) const { ucp_worker_destroy(worker); }
};
struct ListenerDeleter {
  void operator()(ucp_listener_h listener) const { ucp_listener_destroy(listener); }
};
using Context = std::unique_ptr<std::remove_pointer_t<ucp_context_h>, ContextDeleter>;
using WorkerHandle = std::unique_ptr<std::remove_pointer_t<ucp_worker_h>, WorkerDeleter>;
using Listener = std::unique_ptr<std::remove_pointer_t<ucp_listener_h>, ListenerDeleter>;

// A UCP context for active messages with wake-up (UCX_* environment variables respected) and its
// one worker, whose event fd the owner sleeps on. Throws std::runtime_error naming the failed call.
std::pair<Context, WorkerHandle> open_worker(const std::string& name) {
  ucp_config_t* config = nullptr;
  if (const auto status = ucp_config_read(nullptr, nullptr, &config); status != UCS_OK)
    throw std::runtime_error("UCX configuration (UCX_* variables): " + status_text(status));
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = name.c_str();
  ucp_context_h raw_context = nullptr;
  const auto status = ucp_init(&params, config, &raw_context);
  ucp_config_release(config);
  if (status != UCS_OK)
    throw std::runtime_error("UCX could not start (ucp_init): " + status_text(status) +
                             "; check UCX_TLS and the other UCX_* variables");
  Context context(raw_context);
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time: the constructor's, then the event loop's, then the destructor's.
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h raw_worker = nullptr;
  if (const auto created = ucp_worker_create(context.get(), &worker_params, &raw_worker); created != UCS_OK)
    throw std::runtime_error("UCX worker (ucp_worker_create): " + status_text(created));
  return {std::move(context), WorkerHandle(raw_worker)};
}

// Progresses `worker` until `done` or `timeout_s` passed, sleeping on its event fd between rounds.
template <typename Done>
bool progress_until(ucp_worker_h worker, int event_fd, double timeout_s, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    if (ucp_worker_progress(worker) != 0) continue;
    if (ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;
    pollfd fd{event_fd, POLLIN, 0};
    ::poll(&fd, 1, 10);
  }
  return true;
}

// Waits up to `timeout_s` until every operation of `worker` completed at its transport.
bool flush_worker(ucp_worker_h worker, int event_fd, double timeout_s) {
  bool done = false;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = [](void* request, ucs_status_t, void* user_data) {
    *static_cast<bool*>(user_data) = true;
    ucp_request_free(request);
  };
  param.user_data = &done;
  void* request = ucp_worker_flush_nbx(worker, &param);
  if (request == nullptr) return true;
  if (UCS_PTR_IS_ERR(request)) return false;
  if (progress_until(worker, event_fd, timeout_s, [&] { return done; })) return true;
  ucp_request_cancel(worker, request);  // its callback still runs, and frees it
  progress_until(worker, event_fd, 0.1, [&] { return done; });
  return false;
}

// Starts closing `ep` (`force`: at once, dropping what is in flight; else after flushing it); the
// request joins `closing` unless it closed at once.
void close_endpoint(ucp_ep_h ep, bool force, std::vector<void*>& closing) {
  ucp_request_param_t param{};
  if (force) {
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  }
  void* request = ucp_ep_close_nbx(ep, &param);
  if (request != nullptr && !UCS_PTR_IS_ERR(request)) closing.push_back(request);
}

// Frees the requests of `closing` that completed; true once none is left.
bool reap_closed(std::vector<void*>& closing) {
  std::erase_if(closing, [](void* request) {
    if (ucp_request_check_status(request) == UCS_INPROGRESS) return false;
    ucp_request_free(request);
    return true;
  });
  return closing.empty();
}

// Closes what is left of `closing` within `timeout_s`; a request still open then is given back to
// UCX (it completes without us), so the worker can go.
bool finish_closing(ucp_worker_h worker, int event_fd, std::vector<void*>& closing, double timeout_s) {
  if (progress_until(worker, event_fd, timeout_s, [&] { return reap_closed(closing); })) return true;
  for (void* request : closing) ucp_request_free(request);
  closing.clear();
  return false;
}

}  // namespace

// ---------------------------------------------------------------- UcxNodeRuntime::Worker

// The node's UCP objects and connection state. Created on the constructor's thread, then used only by
// the event loop, then by the destructor once the loop has ended. UCX's callbacks run inside
// ucp_worker_progress on that thread: they only change this state (a received message is queued
// in ready_), and what they cannot do there (deliver, close an endpoint, fail, retry) waits for
// after_progress().
class UcxNodeRuntime::Worker {
 public:
  explicit Worker(UcxNodeRuntime& owner) : owner_(owner), pacer_(owner.own_pacing_rate("UCX")) {
    if (owner.options_.max_payload_bytes > 0) limits_.max_payload_bytes = owner.options_.max_payload_bytes;
    if (!owner.options_.job_token.empty()) key_.emplace(owner.options_.job_token);
    const auto where = split_host_port(owner.options_.bind, /*any_port=*/true);
    if (!where)
      throw BindError("cannot bind " + owner.options_.bind + ": expected HOST:PORT with PORT a number or *");
    std::string error;
    const auto address = resolve(where->host, where->port, error);
    if (!address) throw BindError("cannot bind " + owner.options_.bind + ": " + error);
    try {
      std::tie(context_, worker_) = open_worker(owner.options_.label);
    } catch (const std::runtime_error& e) {
      throw BindError("cannot bind " + owner.options_.bind + ": " + e.what());
    }
    transports_ = transport_names(printed([&](FILE* out) { ucp_context_print_info(context_.get(), out); }),
                                  "resource", "self/");
    // Connections open through UCX's sockaddr connection manager, whose endpoints need a network
    // transport (TCP, or verbs on an RDMA fabric); shared memory alone connects nothing.
    if (!has_network_transport(transports_)) {
      const char* tls = std::getenv("UCX_TLS");
      throw BindError("cannot bind " + owner.options_.bind + ": UCX_TLS=\"" + (tls == nullptr ? "" : tls) +
                      "\" leaves UCX no network transport to open connections with (it has: " +
                      (transports_.empty() ? "none" : transports_) +
                      "); add tcp (or rc/ud/dc on an RDMA fabric), e.g. UCX_TLS=sm,self,tcp, or unset it");
    }
    if (const auto status = ucp_worker_get_efd(worker_.get(), &event_fd_); status != UCS_OK)
      throw BindError("cannot bind " + owner.options_.bind + ": UCX worker event fd: " + status_text(status));
    set_handler(RawUcxClient::kFrame, &dispatch<&Worker::on_frame_am>);
    set_handler(RawUcxClient::kProof, &dispatch<&Worker::on_proof_am>);
    set_handler(RawUcxClient::kWelcome, &dispatch<&Worker::on_welcome_am>);

    ucp_listener_params_t params{};
    params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    params.sockaddr.addr = address->get();
    params.sockaddr.addrlen = address->length;
    params.conn_handler.cb = [](ucp_conn_request_h request, void* arg) {
      static_cast<Worker*>(arg)->on_connection(request);
    };
    params.conn_handler.arg = this;
    ucp_listener_h listener = nullptr;
    if (const auto status = ucp_listener_create(worker_.get(), &params, &listener); status != UCS_OK)
      throw BindError("cannot bind " + owner.options_.bind + ": " + status_text(status));
    listener_.reset(listener);
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    if (const auto status = ucp_listener_query(listener, &attr); status != UCS_OK)
      throw BindError("cannot bind " + owner.options_.bind + ": listener address: " + status_text(status));
    address_ = where->host + ":" + std::to_string(port_of(attr.sockaddr));
    if (const auto status = ucp_worker_get_address(worker_.get(), &worker_address_, &worker_address_bytes_);
        status != UCS_OK)
      throw BindError("cannot bind " + owner.options_.bind + ": UCX worker address: " + status_text(status));
  }

  ~Worker() {
    // The loop is over, and linger() flushed what a node process sent last: the endpoints close at
    // once (a flushing close would wait for peers whose loops have ended too), then the listener and
    // the worker.
    for (auto& [address, link] : out_)
      for (const auto ep : {link->ep, link->data_ep})
        if (ep != nullptr) close_endpoint(ep, true, closing_);
    for (auto& [id, link] : in_)
      if (!link->closing && link->ep != nullptr) close_endpoint(link->ep, true, closing_);
    for (const auto ep : to_close_) close_endpoint(ep, true, closing_);
    to_close_.clear();
    if (!finish_closing(worker_.get(), event_fd_, closing_, kCloseWaitS))
      owner_.host_.log_line(owner_.options_.label + ": UCX endpoints did not close within " +
                            std::to_string(static_cast<int>(kCloseWaitS)) + " s");
    listener_.reset();
    if (worker_address_ != nullptr) ucp_worker_release_address(worker_.get(), worker_address_);
    worker_.reset();
    // What never completed went with the worker, without its callback.
    for (auto* receiving : receiving_) std::unique_ptr<Receiving>{receiving};
    for (auto* sending : sending_) std::unique_ptr<Sending>{sending};
  }

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const std::string& address() const { return address_; }
  const std::string& transports() const { return transports_; }
  void wake() const { wake_.signal(); }

  void connect(NodeId id, const std::string& address) {
    auto it = out_.find(address);
    if (it == out_.end()) {
      const auto where = split_host_port(address, /*any_port=*/false);
      std::string error = "expected HOST:PORT";
      const auto resolved = where ? resolve(where->host, where->port, error) : std::nullopt;
      if (!resolved) {
        owner_.fail("address of node " + std::to_string(id) + " \"" + address + "\": " + error);
        return;
      }
      auto link = std::make_unique<OutLink>();
      link->address = address;
      link->to = *resolved;
      it = out_.emplace(address, std::move(link)).first;
      open(*it->second);
    }
    routes_[id] = it->second.get();
  }

  // Queued per peer in the simulator's stream order; what one loop round queued leaves in flush().
  void queue(Message message) {
    auto key = send_order_key(message);
    outgoing_[message.header.recipient].emplace(key, std::move(message));
  }

  void flush() {
    for (auto& [to, queue] : outgoing_) {
      if (queue.empty()) continue;
      const auto route = routes_.find(to);
      if (route == routes_.end()) {
        owner_.log("dropped " + std::to_string(queue.size()) + " message(s) to node " + std::to_string(to) +
                   ": no connection to it");
        queue.clear();
        continue;
      }
      OutLink& link = *route->second;
      if (link.state == OutLink::State::kConnecting || link.state == OutLink::State::kWelcomed)
        continue;  // held until the data endpoint is open
      if (link.state == OutLink::State::kLost) {
        if (!owner_.halting())
          owner_.fail("send to node " + std::to_string(to) + ": the connection to " + link.address +
                      " was lost");
        queue.clear();
        continue;
      }
      // A paced peer (lighter than the heaviest in the load balancer's table, PSTWIN_NIC_RATE set)
      // gets one data message, then none until it has had time to leave at its share; its control
      // messages still go.
      const double now = pacer_.active() ? owner_.now() : 0;
      for (auto it = queue.begin(); it != queue.end();) {
        const bool data = !it->second.payload.is_phantom() && !it->second.payload.empty();
        if (data && pacer_.active() && pacer_.held(to, now)) {
          ++it;
          continue;
        }
        const std::uint64_t wire_bytes = kHeaderBytes + it->second.payload.size();
        transmit(link, std::move(it->second));
        if (data && pacer_.active()) pacer_.sent(to, wire_bytes, now);
        it = queue.erase(it);
      }
    }
  }

  void set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) {
    if (auto error = pacer_.set_weights(version, weights)) owner_.log("send weights refused: " + *error);
  }

  // Progresses the worker and hands what arrived to the protocol.
  void receive() {
    progress();
    expire_unproven();
    while (!ready_.empty() && !owner_.halting()) {
      Message message = std::move(ready_.front());
      ready_.pop_front();
      owner_.deliver(std::move(message));
    }
  }

  // Sleeps until UCX has something, wake() is called, or `timeout_ms` passes (-1: no limit). The
  // worker is armed only once a progress round found nothing: armed with events pending, its fd
  // would never be signalled for them.
  void wait(long timeout_ms) {
    if (progress() || !ready_.empty()) return;
    const auto armed = ucp_worker_arm(worker_.get());
    if (armed == UCS_ERR_BUSY) return;
    if (armed != UCS_OK) throw std::runtime_error("UCX worker (ucp_worker_arm): " + status_text(armed));
    double wait_s = timeout_ms < 0 ? -1 : static_cast<double>(std::min<long>(timeout_ms, 1 << 30)) / 1e3;
    // Handshake deadlines are looked at again at least this often.
    constexpr double kHandshakeCheckS = 0.1;
    if (unproven_ > 0) wait_s = wait_s < 0 ? kHandshakeCheckS : std::min(wait_s, kHandshakeCheckS);
    if (pacer_.active()) {
      // A held peer's release cuts the wait short, to the microsecond (ppoll).
      const double now = owner_.now();
      if (const auto release = pacer_.next_release(now))
        wait_s = wait_s < 0 ? *release - now : std::min(wait_s, *release - now);
    }
    std::array<pollfd, 2> fds{pollfd{event_fd_, POLLIN, 0}, pollfd{wake_.fd(), POLLIN, 0}};
    timespec limit{};
    if (wait_s >= 0) {
      const auto ns = static_cast<long long>(std::ceil(wait_s * 1e9));
      limit.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
      limit.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    }
    if (::ppoll(fds.data(), fds.size(), wait_s < 0 ? nullptr : &limit, nullptr) < 0) {
      if (errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) wake_.drain();
  }

  // After the loop ended: sends what is queued and waits up to `linger_ms` for it to leave.
  // A send completes when UCX holds its bytes (over TCP, in its own buffers): the worker is flushed
  // too, or closing the endpoints could drop what was sent last.
  bool linger(int linger_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(linger_ms);
    const auto left_s = [&] {
      return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    };
    const bool sent = progress_until(worker_.get(), event_fd_, left_s(), [&] {
      progress();
      flush();
      const bool queued =
          std::ranges::any_of(outgoing_, [](const auto& entry) { return !entry.second.empty(); });
      return !queued && sending_.empty();
    });
    return sent && flush_worker(worker_.get(), event_fd_, left_s());
  }

 private:
  // Our endpoint to a peer's listener: what we send to the node(s) at that address.
  // The sockaddr endpoint only opens the connection: its welcome carries the peer's worker address,
  // and the data endpoint made from that address is the one UCX wires up over every transport the
  // two workers share (shared memory on one host; a sockaddr endpoint in UCX 1.13 takes the
  // connection manager's device only, TCP here).
  struct OutLink {
    enum class State { kConnecting, kWelcomed, kOpen, kLost };
    std::string address;
    SocketAddress to;
    ucp_ep_h ep = nullptr;       // to the peer's listener
    ucp_ep_h data_ep = nullptr;  // to the peer's worker address: what the messages take
    State state = State::kConnecting;
    std::uint64_t next_sequence = 0;
    // From the welcome, until the data endpoint is made after the progress round.
    std::uint64_t peer_link = 0;
    std::vector<std::byte> proof;
    std::vector<std::byte> peer_address;
  };
  // A message of an accepted connection, waiting for the ones before it or for its rendezvous data.
  struct Arrival {
    Message message;
    bool complete = false;
    bool refused = false;
  };
  // An endpoint our listener accepted: what one peer sends us.
  struct InLink {
    std::uint64_t id = 0;
    ucp_ep_h ep = nullptr;  // accepted from the listener; the data endpoint's far side is UCX's own
    std::string host;
    bool proven = false;    // without a job key, at once
    bool attached = false;  // the connecting side's first message (its proof, or an empty one) came
    HandshakeBytes challenge{};
    Seconds deadline = 0;
    NodeId bound = kNoNode;  // the first node its messages name: any other is forged
    std::uint64_t next_sequence = 0;
    std::map<std::uint64_t, Arrival> arrivals;  // by link sequence
    bool closing = false;
  };
  // A send in flight: its header bytes and payload stay alive until UCX is done with them.
  struct Sending {
    Worker* worker = nullptr;
    NodeId to = kNoNode;
    std::vector<std::byte> header;
    Payload payload;
  };
  // A rendezvous receive in flight, into `buffer`.
  struct Receiving {
    Worker* worker = nullptr;
    std::uint64_t link = 0;
    std::uint64_t sequence = 0;
    std::shared_ptr<ByteBuffer> buffer;
  };

  using AmHandler = ucs_status_t (Worker::*)(std::span<const std::byte>, void*, std::size_t,
                                             const ucp_am_recv_param_t&);

  template <AmHandler>
  static ucs_status_t dispatch(void* arg, const void* header, std::size_t header_length, void* data,
                               std::size_t length, const ucp_am_recv_param_t* param);

  void set_handler(unsigned id, ucp_am_recv_callback_t handler) {
    ucp_am_handler_param_t param{};
    param.field_mask =
        UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    param.id = id;
    param.arg = this;
    param.cb = handler;
    if (const auto status = ucp_worker_set_am_recv_handler(worker_.get(), &param); status != UCS_OK)
      throw BindError("cannot bind " + owner_.options_.bind +
                      ": UCX active message handler: " + status_text(status));
  }

  // One round of UCX progress and what its callbacks left to do; true if anything happened.
  bool progress() {
    bool any = false;
    while (ucp_worker_progress(worker_.get()) != 0) any = true;
    for (OutLink* link : std::exchange(welcomed_, {}))
      if (link->state == OutLink::State::kWelcomed) open_data(*link);
    for (const auto ep : to_close_) close_endpoint(ep, true, closing_);
    to_close_.clear();
    reap_closed(closing_);
    for (const auto id : closed_) in_.erase(id);
    closed_.clear();
    if (retry_due_ && !retry_armed_ && !owner_.halting()) {
      retry_armed_ = true;
      owner_.start_timer(kRetryConnectS, [this] { retry(); });
    }
    if (!failure_.empty() && !owner_.halting()) owner_.fail(std::exchange(failure_, ""));
    return any;
  }

  void open(OutLink& link) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    params.sockaddr.addr = link.to.get();
    params.sockaddr.addrlen = link.to.length;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = [](void* arg, ucp_ep_h ep, ucs_status_t status) {
      static_cast<Worker*>(arg)->on_endpoint_error(ep, status);
    };
    params.err_handler.arg = this;
    link.state = OutLink::State::kConnecting;
    link.next_sequence = 0;
    ucp_ep_h ep = nullptr;
    if (const auto status = ucp_ep_create(worker_.get(), &params, &ep); status != UCS_OK) {
      failure_ = "connect to " + link.address + ": " + status_text(status);
      return;
    }
    link.ep = ep;
    out_by_ep_[ep] = &link;
  }

  void retry() {
    retry_armed_ = false;
    retry_due_ = false;
    for (auto& [address, link] : out_)
      if (link->ep == nullptr && link->state == OutLink::State::kConnecting) open(*link);
  }

  void on_endpoint_error(ucp_ep_h ep, ucs_status_t status) {
    if (const auto out = out_by_ep_.find(ep); out != out_by_ep_.end()) {
      OutLink& link = *out->second;
      out_by_ep_.erase(out);
      to_close_.push_back(ep);
      if (ep == link.ep) {
        link.ep = nullptr;
        if (link.state == OutLink::State::kConnecting) {
          retry_due_ = true;  // not listening yet: again soon
          return;
        }
      }
      // The peer ended: its listener's endpoint watches it for the link (the data endpoint has no
      // error handling of its own, which is what lets UCX 1.13 give it shared memory). Lost between
      // messages, this is a peer that finished; a message to it later fails the node.
      if (link.data_ep != nullptr) {
        out_by_ep_.erase(link.data_ep);
        to_close_.push_back(link.data_ep);
        link.data_ep = nullptr;
      }
      link.state = OutLink::State::kLost;
      return;
    }
    const auto in = in_by_ep_.find(ep);
    if (in == in_by_ep_.end()) return;
    InLink& link = *in_.at(in->second);
    if (ep == link.ep && link.attached) {
      // The peer ended. What it sent last may still be on its way over shared memory: the data
      // endpoint's far side stays the link's.
      in_by_ep_.erase(in);
      to_close_.push_back(ep);
      link.ep = nullptr;
      return;
    }
    const bool unfinished =
        std::ranges::any_of(link.arrivals, [](const auto& a) { return !a.second.complete; });
    if (unfinished && link.proven && !owner_.halting())
      failure_ = from(link) + ": connection: peer closed the connection with " +
                 std::to_string(link.arrivals.size()) + " message(s) unfinished (" + status_text(status) +
                 ")";
    close_in(link);
  }

  void on_connection(ucp_conn_request_h request) {
    ucp_conn_request_attr_t attr{};
    attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
    std::string host = "unknown host";
    if (ucp_conn_request_query(request, &attr) == UCS_OK) host = host_text(attr.client_address);
    if (owner_.halting()) {
      ucp_listener_reject(listener_.get(), request);
      return;
    }
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.conn_request = request;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = [](void* arg, ucp_ep_h ep, ucs_status_t status) {
      static_cast<Worker*>(arg)->on_endpoint_error(ep, status);
    };
    params.err_handler.arg = this;
    ucp_ep_h ep = nullptr;
    if (const auto status = ucp_ep_create(worker_.get(), &params, &ep); status != UCS_OK) {
      refuse_host(host, "could not accept a connection: " + status_text(status));
      return;
    }
    // Past the cap the oldest goes, not the newest: a member proves within a round trip, so a flood
    // of connections that never answer cannot keep it out.
    if (key_ && unproven_ >= kMaxUnproven) {
      for (auto& [id, other] : in_) {
        if (other->proven || other->closing) continue;
        refuse_host(other->host, "the oldest of " + std::to_string(unproven_) +
                                     " connections proving membership (at most " +
                                     std::to_string(kMaxUnproven) + " at once) while another came");
        close_in(*other);
        break;
      }
    }
    auto link = std::make_unique<InLink>();
    link->id = next_in_id_++;
    link->ep = ep;
    link->host = host;
    link->proven = !key_;
    // The welcome: [this link's id][the challenge, with a job key] and our worker address.
    std::vector<std::byte> welcome(kSequenceBytes);
    write_u64(welcome, link->id);
    if (key_) {
      link->challenge = JobKey::challenge();
      link->deadline = owner_.now() + kHandshakeTimeoutS;
      welcome.insert(welcome.end(), link->challenge.begin(), link->challenge.end());
      ++unproven_;
    }
    in_by_ep_[ep] = link->id;
    in_.emplace(link->id, std::move(link));
    send_small(ep, RawUcxClient::kWelcome, welcome,
               std::span(static_cast<const std::byte*>(static_cast<const void*>(worker_address_)),
                         worker_address_bytes_));
  }

  // The peer's welcome on our endpoint: its link id, its challenge (with a job key) and its worker
  // address. The data endpoint is made after the progress round (open_data()).
  ucs_status_t on_welcome_am(std::span<const std::byte> header, void* data, std::size_t length,
                             const ucp_am_recv_param_t& param) {
    if ((param.recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) return UCS_OK;
    const auto found = out_by_ep_.find(reply_ep(param));
    if (found == out_by_ep_.end() || found->second->state != OutLink::State::kConnecting) return UCS_OK;
    OutLink& link = *found->second;
    if (header.size() < kSequenceBytes || length == 0) {
      failure_ = "node at " + link.address + " answered with something other than a pstwin UCX welcome";
      return UCS_OK;
    }
    const auto challenge = header.subspan(kSequenceBytes);
    link.proof.clear();
    if (key_) {
      const auto proof = key_->prove(challenge);
      if (!proof) {
        failure_ = "node at " + link.address +
                   " answered without a membership challenge: is it a pstwin node of this job with "
                   "PSTWIN_JOB_TOKEN set (every node of a job needs it, or none)?";
        return UCS_OK;
      }
      link.proof.assign(proof->begin(), proof->end());
    } else if (!challenge.empty()) {
      failure_ = "node at " + link.address +
                 " asks for a membership proof: set PSTWIN_JOB_TOKEN for every node of the job, or for none";
      return UCS_OK;
    }
    link.peer_link = read_u64(header);
    const auto* address = static_cast<const std::byte*>(data);
    link.peer_address.assign(address, address + length);
    link.state = OutLink::State::kWelcomed;
    welcomed_.push_back(&link);
    return UCS_OK;
  }

  // A welcomed link's data endpoint, to the peer's worker address; its first message names the link
  // and carries the proof (empty without a job key). Then the link's messages may go.
  void open_data(OutLink& link) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address = static_cast<const ucp_address_t*>(static_cast<const void*>(link.peer_address.data()));
    // Peer-failure handling would keep UCX 1.13 off shared memory: the listener's endpoint watches
    // the peer instead (on_endpoint_error).
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    ucp_ep_h ep = nullptr;
    if (const auto status = ucp_ep_create(worker_.get(), &params, &ep); status != UCS_OK) {
      owner_.fail("connect to " + link.address + " (its worker address): " + status_text(status));
      return;
    }
    link.data_ep = ep;
    out_by_ep_[ep] = &link;
    std::array<std::byte, 2 * kSequenceBytes> header{};
    write_u64(std::span(header).first(kSequenceBytes), link.next_sequence++);
    write_u64(std::span(header).subspan(kSequenceBytes), link.peer_link);
    send_small(ep, RawUcxClient::kProof, header, link.proof);
    link.state = OutLink::State::kOpen;
    if (!logged_lanes_) {
      logged_lanes_ = true;
      const std::string lanes =
          transport_names(printed([&](FILE* out) { ucp_ep_print_info(ep, out); }), "lane[", "");
      owner_.log("UCX to " + link.address + " over " + (lanes.empty() ? "(lanes unknown)" : lanes));
    }
  }

  // A connecting side's first message, on its data endpoint (or on the accepted one): [sequence 0][the
  // link id its welcome gave], and the membership proof (empty without a job key). It makes the data
  // endpoint's far side one of the link's.
  ucs_status_t on_proof_am(std::span<const std::byte> header, void* data, std::size_t length,
                           const ucp_am_recv_param_t& param) {
    const ucp_ep_h ep = reply_ep(param);
    if (header.size() != 2 * kSequenceBytes || ep == nullptr) {
      refuse_host("unknown host", "a membership proof without its link (" + std::to_string(header.size()) +
                                      " header bytes, expected " + std::to_string(2 * kSequenceBytes) + ")");
      return UCS_OK;
    }
    const auto found = in_.find(read_u64(header.subspan(kSequenceBytes)));
    const auto mapped = in_by_ep_.find(ep);
    if (found == in_.end() || found->second->closing ||
        (mapped != in_by_ep_.end() && mapped->second != found->first)) {
      refuse_host(mapped != in_by_ep_.end() && in_.contains(mapped->second) ? in_.at(mapped->second)->host
                                                                            : "unknown host",
                  "a membership proof naming a link that is not its own");
      return UCS_OK;
    }
    InLink& link = *found->second;
    if (link.attached) {
      refuse(link, "proof", "a second membership proof on one connection");
      return UCS_OK;
    }
    const std::span proof(static_cast<const std::byte*>(data), length);
    const bool eager = (param.recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0;
    const bool proven =
        eager && read_u64(header) == 0 && (key_ ? key_->verify(link.challenge, proof) : proof.empty());
    if (!proven) {
      refuse(link, "proof",
             key_ ? "wrong membership proof: the peer does not hold this job's PSTWIN_JOB_TOKEN"
                  : "a membership proof to a node without PSTWIN_JOB_TOKEN (every node of a job needs it, or "
                    "none)");
      close_in(link);
      return UCS_OK;
    }
    if (!link.proven) --unproven_;
    link.proven = true;
    link.attached = true;
    link.next_sequence = 1;
    in_by_ep_[ep] = link.id;
    drain(link);
    return UCS_OK;
  }

  // A message on an accepted connection. Every check runs on the header before anything is
  // allocated or received for the payload.
  ucs_status_t on_frame_am(std::span<const std::byte> header, void* data, std::size_t length,
                           const ucp_am_recv_param_t& param) {
    InLink* found = incoming(param);
    if (found == nullptr) return UCS_OK;
    InLink& link = *found;
    if (!link.proven || !link.attached) {
      refuse(
          link, "membership",
          "a message on a connection that has not proven membership (its sender has no PSTWIN_JOB_TOKEN, or "
          "another job's)");
      close_in(link);
      return UCS_OK;
    }
    const bool member = link.bound != kNoNode;
    if (header.size() != kFrameHeaderBytes) {
      refuse(
          link, "header",
          "has " + std::to_string(header.size()) + " bytes, expected " + std::to_string(kFrameHeaderBytes));
      close_in(link);  // without a sequence, nothing after it can be put in order
      return UCS_OK;
    }
    const std::uint64_t sequence = read_u64(header);
    // Until a message binds the connection to a node, nothing is held out of order for it.
    const std::uint64_t window = member ? kReorderWindow : 1;
    if (sequence < link.next_sequence || sequence >= link.next_sequence + window ||
        link.arrivals.contains(sequence)) {
      refuse(link, "sequence",
             std::to_string(sequence) + " where " + std::to_string(link.next_sequence) + " was next");
      close_in(link);
      return UCS_OK;
    }
    Arrival& arrival = link.arrivals[sequence];
    // A member's message that fails a check is dropped alone; before the first good one, the
    // connection goes with it (as the epoll van).
    auto reject = [&](std::string_view field, const std::string& detail) {
      refuse(link, field, detail);
      arrival.refused = true;
      arrival.complete = true;
      if (!member)
        close_in(link);
      else
        drain(link);
      return UCS_OK;
    };
    Message& message = arrival.message;
    bool phantom = false;
    if (auto error = decode_header(header.subspan(kSequenceBytes), message.header, phantom, limits_))
      return reject(error->field, error->detail);
    if (phantom) {
      if (length != 0)
        return reject("payload_length", "phantom frame carries " + std::to_string(length) + " bytes");
      if (message.header.payload_crc != 0) return reject("payload_crc", "phantom frame must have CRC 0");
    } else if (length != message.header.payload_length) {
      return reject("payload_length", "header says " + std::to_string(message.header.payload_length) +
                                          " bytes, the message carries " + std::to_string(length));
    }
    const NodeId self = owner_.self();
    if (member && message.header.sender != link.bound)
      return reject("sender", "a message claiming node " + std::to_string(message.header.sender) +
                                  " on the connection of node " + std::to_string(link.bound));
    // The scheduler answers a registrant through a connection id of its own (ps/ids.hpp), which may
    // arrive after the node table gave the node its id.
    if (self != kNoNode && message.header.recipient != self && message.header.recipient < kRegistrantIdBase)
      return reject("recipient", "frame for node " + std::to_string(message.header.recipient) +
                                     " arrived at node " + std::to_string(self) + " (misrouted)");
    if (!member) link.bound = message.header.sender;
    if (phantom) {
      message.payload = Payload::phantom(message.header.payload_length);
      arrival.complete = true;
    } else if ((param.recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
      const std::span bytes(static_cast<const std::byte*>(data), length);
      if (const auto crc = payload_crc32(bytes); crc != message.header.payload_crc)
        return reject("payload_crc", "header says " + std::to_string(message.header.payload_crc) +
                                         ", payload gives " + std::to_string(crc));
      if (length != 0) message.payload = Payload::adopt(std::make_shared<ByteBuffer>(bytes));
      arrival.complete = true;
    } else {
      start_rendezvous(link, sequence, data, length);
    }
    drain(link);
    return UCS_OK;
  }

  void start_rendezvous(InLink& link, std::uint64_t sequence, void* descriptor, std::size_t length) {
    auto receiving = std::make_unique<Receiving>();
    receiving->worker = this;
    receiving->link = link.id;
    receiving->sequence = sequence;
    receiving->buffer = std::make_shared<ByteBuffer>(length, ByteBuffer::ForOverwrite{});
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.recv_am = [](void* request, ucs_status_t status, std::size_t, void* user_data) {
      std::unique_ptr<Receiving> done(static_cast<Receiving*>(user_data));
      done->worker->receiving_.erase(done.get());
      done->worker->rendezvous_done(*done, status);
      ucp_request_free(request);
    };
    param.user_data = receiving.get();
    void* request =
        ucp_am_recv_data_nbx(worker_.get(), descriptor, receiving->buffer->data(), length, &param);
    if (request == nullptr) {
      rendezvous_done(*receiving, UCS_OK);
      return;
    }
    if (UCS_PTR_IS_ERR(request)) {
      rendezvous_done(*receiving, UCS_PTR_STATUS(request));
      return;
    }
    receiving_.insert(receiving.release());
  }

  void rendezvous_done(const Receiving& receiving, ucs_status_t status) {
    const auto found = in_.find(receiving.link);
    if (found == in_.end() || found->second->closing) return;
    InLink& link = *found->second;
    const auto arrival = link.arrivals.find(receiving.sequence);
    if (arrival == link.arrivals.end()) return;
    Message& message = arrival->second.message;
    arrival->second.complete = true;
    if (status != UCS_OK) {
      arrival->second.refused = true;
      refuse(link, "payload", "rendezvous receive failed: " + status_text(status));
    } else if (const auto crc = payload_crc32(receiving.buffer->bytes()); crc != message.header.payload_crc) {
      arrival->second.refused = true;
      refuse(link, "payload_crc",
             "header says " + std::to_string(message.header.payload_crc) + ", payload gives " +
                 std::to_string(crc));
    } else {
      message.payload = Payload::adopt(receiving.buffer);
    }
    drain(link);
  }

  // Queues the link's messages that are complete and next in its sequence for delivery.
  void drain(InLink& link) {
    while (!link.arrivals.empty() && link.arrivals.begin()->first == link.next_sequence &&
           link.arrivals.begin()->second.complete) {
      auto node = link.arrivals.extract(link.arrivals.begin());
      ++link.next_sequence;
      if (node.mapped().refused) continue;
      Message& message = node.mapped().message;
      if (owner_.host_.tracing()) {
        const Seconds at = owner_.now();
        owner_.trace_lane("recv<-" + std::to_string(message.header.sender), "receive",
                          span_name(message.header), at, at, trace_message(message));
      }
      ready_.push_back(std::move(message));
    }
  }

  void transmit(OutLink& link, Message message) {
    const Seconds start = owner_.now();
    // A zero-copy view is read now, at transmission, as the simulator does.
    message.payload = message.payload.frozen();
    const HeaderBytes wire = encode_header(message.header, message.payload, /*compute_crc=*/true);
    std::vector<std::byte> header(kFrameHeaderBytes);
    write_u64(header, link.next_sequence++);
    std::ranges::copy(wire, header.begin() + kSequenceBytes);
    const std::uint64_t wire_bytes = kHeaderBytes + message.payload.size();
    owner_.host_.count_message(message.header, wire_bytes);
    if (owner_.host_.tracing())
      owner_.trace_lane("send->" + std::to_string(message.header.recipient), "send",
                        span_name(message.header), start, owner_.now(), trace_message(message));
    const NodeId to = message.header.recipient;
    const auto body = message.payload.is_phantom() ? std::span<const std::byte>() : message.payload.bytes();
    send_am(link.data_ep, RawUcxClient::kFrame, std::move(header), body, to, std::move(message.payload));
  }

  // Sends one active message; `header` and `payload` stay alive until UCX is done with them.
  void send_am(ucp_ep_h ep, unsigned id, std::vector<std::byte> header, std::span<const std::byte> data,
               NodeId to, Payload payload = {}) {
    auto sending = std::make_unique<Sending>(Sending{this, to, std::move(header), std::move(payload)});
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_REPLY;
    param.cb.send = [](void* request, ucs_status_t status, void* user_data) {
      std::unique_ptr<Sending> done(static_cast<Sending*>(user_data));
      done->worker->sending_.erase(done.get());
      if (status != UCS_OK) done->worker->send_failed(*done, status);
      ucp_request_free(request);
    };
    param.user_data = sending.get();
    void* request = ucp_am_send_nbx(ep, id, sending->header.data(), sending->header.size(), data.data(),
                                    data.size(), &param);
    if (request == nullptr) return;
    if (UCS_PTR_IS_ERR(request)) {
      send_failed(*sending, UCS_PTR_STATUS(request));
      return;
    }
    sending_.insert(sending.release());  // the completion callback owns it now
  }

  void send_failed(const Sending& sending, ucs_status_t status) {
    if (owner_.halting() || sending.to == kNoNode) return;
    if (failure_.empty())
      failure_ = "send to node " + std::to_string(sending.to) + " failed: " + status_text(status);
  }

  // A handshake message: not one of the protocol's, so its failure fails nothing (the peer's does).
  void send_small(ucp_ep_h ep, unsigned id, std::span<const std::byte> header,
                  std::span<const std::byte> data) {
    send_am(ep, id, std::vector<std::byte>(header.begin(), header.end()), data, kNoNode);
  }

  static ucp_ep_h reply_ep(const ucp_am_recv_param_t& param) {
    return (param.recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 ? param.reply_ep : nullptr;
  }

  // The accepted connection a message came on; nullptr (refused) if it names none.
  InLink* incoming(const ucp_am_recv_param_t& param) {
    const auto found = in_by_ep_.find(reply_ep(param));
    if (found == in_by_ep_.end()) {
      refuse_host("unknown host", "a message without its connection (sent without UCP_AM_SEND_FLAG_REPLY?)");
      return nullptr;
    }
    InLink& link = *in_.at(found->second);
    return link.closing ? nullptr : &link;
  }

  std::string from(const InLink& link) const {
    return link.bound != kNoNode ? "node " + std::to_string(link.bound) : link.host;
  }

  void refuse(const InLink& link, std::string_view field, const std::string& detail) {
    ++owner_.rejected_;
    owner_.refuse(from(link), "rejected a frame: " + std::string(field) + ": " + detail);
  }

  void refuse_host(const std::string& host, const std::string& why) {
    ++owner_.rejected_;
    owner_.refuse(host, why);
  }

  void close_in(InLink& link) {
    if (link.closing) return;
    link.closing = true;
    if (!link.proven) --unproven_;
    link.arrivals.clear();
    std::erase_if(in_by_ep_, [&](const auto& entry) { return entry.second == link.id; });
    if (link.ep != nullptr) to_close_.push_back(link.ep);
    link.ep = nullptr;
    closed_.push_back(link.id);  // erased after the progress round: a callback may still hold it
  }

  void expire_unproven() {
    if (unproven_ == 0) return;
    const Seconds now = owner_.now();
    std::vector<InLink*> expired;
    for (auto& [id, link] : in_)
      if (!link->proven && !link->closing && link->deadline <= now) expired.push_back(link.get());
    for (InLink* link : expired) {
      refuse_host(link->host, "did not prove membership within " +
                                  std::to_string(static_cast<int>(kHandshakeTimeoutS)) + " s");
      close_in(*link);
    }
    progress();  // closes them
  }

  UcxNodeRuntime& owner_;
  fpt::MessagePacer pacer_;
  DecodeLimits limits_{};
  std::optional<JobKey> key_;  // PSTWIN_JOB_TOKEN's
  Context context_;
  WorkerHandle worker_;  // after context_: destroyed before it
  Listener listener_;    // after worker_: destroyed before it
  int event_fd_ = -1;
  EventFd wake_;
  std::string address_;
  std::string transports_;
  ucp_address_t* worker_address_ = nullptr;  // sent in every welcome
  std::size_t worker_address_bytes_ = 0;
  std::map<std::string, std::unique_ptr<OutLink>> out_;  // by peer address
  std::vector<OutLink*> welcomed_;                       // this progress round's welcomes
  std::map<ucp_ep_h, OutLink*> out_by_ep_;
  std::map<NodeId, OutLink*> routes_;
  std::map<NodeId, std::map<SendOrderKey, Message>> outgoing_;
  std::map<std::uint64_t, std::unique_ptr<InLink>> in_;  // by id, in the order they were accepted
  std::map<ucp_ep_h, std::uint64_t> in_by_ep_;
  std::uint64_t next_in_id_ = 0;
  std::size_t unproven_ = 0;
  std::deque<Message> ready_;  // received, in order, for the protocol
  std::vector<ucp_ep_h> to_close_;
  std::vector<std::uint64_t> closed_;  // accepted connections closed in this progress round
  std::set<Receiving*> receiving_;     // rendezvous receives in flight (owned; freed by their callback)
  std::set<Sending*> sending_;         // sends in flight (owned; freed by their callback)
  std::vector<void*> closing_;         // endpoint closes in flight
  bool retry_due_ = false;
  bool retry_armed_ = false;
  bool logged_lanes_ = false;
  std::string failure_;  // found in a callback; the node fails after the progress round
};

template <UcxNodeRuntime::Worker::AmHandler handler>
ucs_status_t UcxNodeRuntime::Worker::dispatch(void* arg, const void* header, std::size_t header_length,
                                              void* data, std::size_t length,
                                              const ucp_am_recv_param_t* param) {
  auto& self = *static_cast<Worker*>(arg);
  const std::span bytes(static_cast<const std::byte*>(header), header_length);
  return (self.*handler)(header_length == 0 ? std::span<const std::byte>() : bytes, data, length, *param);
}

// ---------------------------------------------------------------- UcxNodeRuntime

UcxNodeRuntime::UcxNodeRuntime(LocalHost& host, Options options)
    : LoopRuntime(host, std::move(options)), worker_(std::make_unique<Worker>(*this)) {
  set_address(worker_->address());
  transports_ = worker_->transports();
  const char* tls = std::getenv("UCX_TLS");
  log("UCX " + std::string(ucp_get_version_string()) + " transports: " + transports_ +
      " (UCX_TLS=" + (tls == nullptr ? "unset" : tls) + ")");
}

UcxNodeRuntime::~UcxNodeRuntime() {
  shut_down();
  // The loop is over: this thread drives the worker now. A node process's last reply leaves first.
  if (options_.linger_ms > 0 && !worker_->linger(options_.linger_ms))
    host_.log_line(options_.label + ": messages still queued after " + std::to_string(options_.linger_ms) +
                   " ms of linger were dropped");
  worker_.reset();
}

void UcxNodeRuntime::bind_peer(NodeId id, const std::string& address) {
  worker_->connect(id, address);
}

void UcxNodeRuntime::queue(Message message) {
  worker_->queue(std::move(message));
}

void UcxNodeRuntime::receive() {
  worker_->receive();
}

void UcxNodeRuntime::flush() {
  worker_->flush();
}

void UcxNodeRuntime::wait(long timeout_ms) {
  worker_->wait(timeout_ms);
}

void UcxNodeRuntime::set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) {
  worker_->set_send_weights(version, weights);
}

void UcxNodeRuntime::wake() {
  worker_->wake();
}

// ---------------------------------------------------------------- RawUcxClient

struct RawUcxClient::State {
  Context context;
  WorkerHandle worker;
  ucp_ep_h ep = nullptr;
  int event_fd = -1;
  std::optional<std::string> welcome;  // the challenge of the welcome's header
  std::uint64_t link = 0;              // the link id of the welcome's header
  std::size_t pending = 0;
};

RawUcxClient::RawUcxClient(std::string_view address) : state_(std::make_unique<State>()) {
  std::tie(state_->context, state_->worker) = open_worker("raw client");
  if (ucp_worker_get_efd(state_->worker.get(), &state_->event_fd) != UCS_OK)
    throw std::runtime_error("UCX worker event fd");
  ucp_am_handler_param_t handler{};
  handler.field_mask =
      UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  handler.id = kWelcome;
  handler.arg = state_.get();
  handler.cb = [](void* arg, const void* header, std::size_t header_length, void*, std::size_t,
                  const ucp_am_recv_param_t*) {
    auto& state = *static_cast<State*>(arg);
    if (header_length < kSequenceBytes) return UCS_OK;
    const auto* bytes = static_cast<const char*>(header);
    state.link = read_u64(std::span(static_cast<const std::byte*>(header), kSequenceBytes));
    state.welcome = std::string(bytes + kSequenceBytes, header_length - kSequenceBytes);
    return UCS_OK;
  };
  ucp_worker_set_am_recv_handler(state_->worker.get(), &handler);
  const auto where = split_host_port(address, false);
  std::string error;
  const auto to = where ? resolve(where->host, where->port, error) : std::nullopt;
  if (!to) throw std::runtime_error("RawUcxClient: bad address " + std::string(address));
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  params.sockaddr.addr = to->get();
  params.sockaddr.addrlen = to->length;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};  // a refused message may close it
  if (const auto status = ucp_ep_create(state_->worker.get(), &params, &state_->ep); status != UCS_OK)
    throw std::runtime_error("RawUcxClient: ucp_ep_create: " + status_text(status));
}

RawUcxClient::~RawUcxClient() {
  std::vector<void*> closing;
  close_endpoint(state_->ep, /*force=*/false, closing);  // what was sent reaches the node first
  finish_closing(state_->worker.get(), state_->event_fd, closing, kCloseWaitS);
}

std::optional<std::string> RawUcxClient::welcome(int timeout_ms) {
  progress_until(state_->worker.get(), state_->event_fd, timeout_ms / 1e3,
                 [&] { return state_->welcome.has_value(); });
  return state_->welcome;
}

void RawUcxClient::send(unsigned id, std::span<const std::byte> header, std::span<const std::byte> data,
                        bool rendezvous) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_AM_SEND_FLAG_REPLY | (rendezvous ? UCP_AM_SEND_FLAG_RNDV : 0);
  param.cb.send = [](void* request, ucs_status_t, void* user_data) {
    --*static_cast<std::size_t*>(user_data);
    ucp_request_free(request);
  };
  param.user_data = &state_->pending;
  void* request =
      ucp_am_send_nbx(state_->ep, id, header.data(), header.size(), data.data(), data.size(), &param);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  ++state_->pending;
  progress_until(state_->worker.get(), state_->event_fd, 2, [&] { return state_->pending == 0; });
}

void RawUcxClient::send_proof(std::span<const std::byte> proof, std::uint64_t sequence) {
  std::array<std::byte, 2 * kSequenceBytes> header{};
  write_u64(std::span(header).first(kSequenceBytes), sequence);
  write_u64(std::span(header).subspan(kSequenceBytes), state_->link);
  send(kProof, header, proof);
}

void RawUcxClient::send_frame(std::uint64_t sequence, std::span<const std::byte> wire_header,
                              std::span<const std::byte> data, bool rendezvous) {
  std::vector<std::byte> header(kSequenceBytes);
  write_u64(header, sequence);
  header.insert(header.end(), wire_header.begin(), wire_header.end());
  send(kFrame, header, data, rendezvous);
}

}  // namespace pstwin::realnet
