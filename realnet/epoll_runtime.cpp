#include "realnet/epoll_runtime.hpp"

#include <sys/timerfd.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/codec.hpp"
#include "ps/ids.hpp"
#include "realnet/host_port.hpp"

namespace pstwin::realnet {

namespace {

constexpr double kRetryConnectS = 0.02;     // a refused peer's listener is tried again this often
constexpr double kMaxRetryConnectS = 1.0;   // ... and a lost peer's, backing off to this
constexpr int kLostConnectTimeoutMs = 200;  // a lost peer's listener that does not answer: tried later

EpollTransport::Options transport_options(const NodeRuntimeOptions& options) {
  const auto where = split_host_port(options.bind, /*any_port=*/true);
  if (!where) throw BindError("cannot bind " + options.bind + ": expected HOST:PORT with PORT a number or *");
  EpollTransport::Options out;
  out.bind_host = where->host;
  out.port = where->port;
  out.own_threads = false;  // the event loop drives it
  out.pool.link_rate_Bps = options.nic_rate_Bps;
  if (options.kernel_pacing) out.pacing = EpollTransport::Options::Pacing::kKernel;
  if (!options.job_token.empty()) out.job_key.emplace(options.job_token);
  if (options.max_payload_bytes > 0) out.limits.max_payload_bytes = options.max_payload_bytes;
  return out;
}

}  // namespace

EpollNodeRuntime::EpollNodeRuntime(LocalHost& host, Options options) : LoopRuntime(host, std::move(options)) {
  auto transport = transport_options(options_);
  const std::string bind_host = transport.bind_host;
  try {
    transport_ = std::make_unique<EpollTransport>(
        kNoNode, std::move(transport),
        EpollTransport::Callbacks{[this](Message message) { on_frame(std::move(message)); },
                                  [this](const TransportError& error) { on_error(error); }});
  } catch (const std::runtime_error& e) {
    const std::string text = e.what();
    throw BindError(text.starts_with("cannot bind") ? text : "cannot bind " + options_.bind + ": " + text);
  }
  set_address(bind_host + ":" + std::to_string(transport_->port()));
  if (options_.pool != nullptr) {
    pool_timer_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (pool_timer_.get() < 0)
      throw std::runtime_error("timerfd_create: " + std::string(std::strerror(errno)));
    transport_->watch(pool_timer_.get());
  }
}

EpollNodeRuntime::~EpollNodeRuntime() {
  shut_down();
  // The loop is over: this thread drives the transport now. A node process's last reply leaves
  // before the sockets close (closing then lets the kernel finish sending what it holds).
  if (options_.linger_ms > 0 && !transport_->drain(options_.linger_ms))
    host_.log_line(options_.label + ": messages still queued after " + std::to_string(options_.linger_ms) +
                   " ms of linger were dropped");
  transport_->stop();
}

void EpollNodeRuntime::set_self(NodeId id) {
  LoopRuntime::set_self(id);
  transport_->set_self(id);
}

std::optional<std::string> EpollNodeRuntime::set_weights(std::uint64_t version,
                                                         std::span<const PeerWeight> weights) {
  return transport_->set_weights(version, weights);
}

void EpollNodeRuntime::set_send_weights(std::uint64_t version, std::span<const PeerWeight> weights) {
  if (auto error = set_weights(version, weights)) log("send weights refused: " + *error);
}

void EpollNodeRuntime::set_receive_weights(std::uint64_t version, std::span<const PeerWeight> weights) {
  if (auto error = transport_->set_receive_weights(version, weights))
    log("receive weights refused: " + *error);
}

void EpollNodeRuntime::bind_peer(NodeId id, const std::string& address) {
  if (const auto it = connected_.find(id); it != connected_.end()) {
    if (it->second != address)
      log("node " + std::to_string(id) + " is already connected at " + it->second + "; keeping that, not " +
          address);
    return;
  }
  if (pending_.contains(id)) return;  // being retried already
  const auto where = split_host_port(address, /*any_port=*/false);
  if (!where) {
    fail("address of node " + std::to_string(id) + " \"" + address + "\" is not HOST:PORT");
    return;
  }
  Pending pending;
  pending.host = where->host;
  pending.port = where->port;
  pending.retry_after_s = kRetryConnectS;
  if (try_connect(id, pending)) return;
  if (halting()) return;  // failed for good
  pending.next_try = now() + kRetryConnectS;
  pending_.emplace(id, std::move(pending));
  arm_retry();
}

bool EpollNodeRuntime::try_connect(NodeId id, Pending& pending) {
  bool refused = false;
  // A lost peer's host may be down: its connect is bounded, so the loop (and its heartbeats) goes on.
  const int timeout_ms = pending.lost ? kLostConnectTimeoutMs : -1;
  if (const auto error = transport_->connect(id, pending.host, pending.port, &refused, timeout_ms)) {
    if (!refused) fail(*error);
    return false;
  }
  connected_[id] = pending.host + ":" + std::to_string(pending.port);
  if (pending.lost)
    log("reconnected to " + describe_peer(id, connected_[id]) + "; " + std::to_string(pending.held.size()) +
        " held message(s) go now" +
        (pending.dropped > 0 ? ", " + std::to_string(pending.dropped) + " were dropped over the bound" : ""));
  for (auto& message : pending.held) hand_over(std::move(message));
  pending.held.clear();
  pending.held_bytes = 0;
  return true;
}

void EpollNodeRuntime::retry_pending() {
  retry_armed_ = false;
  const Seconds at = now();
  for (auto it = pending_.begin(); it != pending_.end() && !halting();) {
    Pending& pending = it->second;
    if ((pending.lost && pending.held.empty()) || pending.next_try > at) {
      ++it;
      continue;
    }
    if (try_connect(it->first, pending)) {
      it = pending_.erase(it);
      continue;
    }
    if (pending.lost) pending.retry_after_s = std::min(kMaxRetryConnectS, pending.retry_after_s * 2);
    pending.next_try = at + pending.retry_after_s;
    ++it;
  }
  arm_retry();
}

void EpollNodeRuntime::arm_retry() {
  if (retry_armed_ || halting()) return;
  double earliest = -1;
  for (const auto& [id, pending] : pending_)
    if (!(pending.lost && pending.held.empty()) && (earliest < 0 || pending.next_try < earliest))
      earliest = pending.next_try;
  if (earliest < 0) return;
  retry_armed_ = true;
  start_timer(std::max(0.0, earliest - now()), [this] { retry_pending(); });
}

void EpollNodeRuntime::queue(Message message) {
  host_.count_message(message.header, kHeaderBytes + message.payload.size());
  if (host_.tracing()) {
    const Seconds at = now();
    trace_lane("send->" + std::to_string(message.header.recipient), "send", span_name(message.header), at, at,
               trace_message(message));
  }
  const NodeId to = message.header.recipient;
  if (!lost_.empty() && std::ranges::find(lost_, to) != lost_.end()) settle_lost();
  if (const auto it = pending_.find(to); it != pending_.end()) {
    hold(it->second, to, std::move(message));
    arm_retry();
    return;
  }
  hand_over(std::move(message));
}

void EpollNodeRuntime::hold(Pending& pending, NodeId peer, Message message) {
  const std::uint64_t bytes = kHeaderBytes + message.payload.size();
  if (pending.held.size() >= kHeldMessages || pending.held_bytes + bytes > kHeldBytes) {
    if (pending.dropped++ == 0)
      log("holding " + std::to_string(pending.held.size()) + " message(s), " +
          std::to_string(pending.held_bytes) + " bytes, for node " + std::to_string(peer) +
          ", which cannot be reached: more are dropped until it can");
    return;
  }
  pending.held_bytes += bytes;
  pending.held.push_back(std::move(message));
}

void EpollNodeRuntime::settle_lost() {
  auto lost = std::move(lost_);
  lost_.clear();
  for (const NodeId id : lost) {
    const auto it = connected_.find(id);
    if (it == connected_.end()) continue;  // settled already
    const auto where = split_host_port(it->second, /*any_port=*/false);
    const std::string address = it->second;
    connected_.erase(it);
    Pending pending;
    if (where) {
      pending.host = where->host;
      pending.port = where->port;
    }
    pending.lost = true;
    pending.retry_after_s = kRetryConnectS;
    pending.next_try = now();
    for (auto& message : transport_->forget(id)) hold(pending, id, std::move(message));
    log("lost the connection to " + describe_peer(id, address) + "; " + std::to_string(pending.held.size()) +
        " queued message(s) are held while it is tried again (the heartbeats decide whether it is dead)");
    pending_.insert_or_assign(id, std::move(pending));
  }
  arm_retry();
}

std::string EpollNodeRuntime::describe_peer(NodeId id, const std::string& address) const {
  const std::string where = "(node " + std::to_string(id) + " at " + address + ")";
  const Role role = role_of(id);
  if (role == Role::kScheduler) return "the scheduler " + where;
  return std::string(role_name(role)) + " " + std::to_string(rank_of(id)) + " " + where;
}

void EpollNodeRuntime::hand_over(Message message) {
  const NodeId to = message.header.recipient;
  if (const auto error = transport_->send(to, std::move(message))) {
    if (!halting()) fail("send to node " + std::to_string(to) + ": " + *error);
  }
}

void EpollNodeRuntime::flush() {
  transport_->pump();
}

void EpollNodeRuntime::wait(long timeout_ms) {
  transport_->poll(static_cast<int>(std::clamp<long>(timeout_ms, -1, INT_MAX)));
}

void EpollNodeRuntime::arm_pool_timer(long timeout_ms) {
  const int wait_ms = transport_->poll_timeout(static_cast<int>(std::clamp<long>(timeout_ms, -1, INT_MAX)));
  if (wait_ms < 0) return;  // a timer armed earlier only costs a spurious turn
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const std::int64_t now_ms = std::int64_t{now.tv_sec} * 1000 + now.tv_nsec / 1'000'000;
  // One timerfd_settime per change that matters: an armed timer due no later than this one stays.
  if (pool_timer_due_ms_ > now_ms && pool_timer_due_ms_ <= now_ms + wait_ms) return;
  itimerspec when{};
  when.it_value.tv_sec = wait_ms / 1000;
  when.it_value.tv_nsec = static_cast<long>(wait_ms % 1000) * 1'000'000 + 1;  // 0 would disarm it
  if (timerfd_settime(pool_timer_.get(), 0, &when, nullptr) != 0) {
    fail("timerfd_settime: " + std::string(std::strerror(errno)));
    return;
  }
  pool_timer_due_ms_ = now_ms + wait_ms;
}

void EpollNodeRuntime::wake() {
  transport_->wake();
}

void EpollNodeRuntime::on_frame(Message message) {
  if (halting()) return;  // the loop is over (linger): nobody handles it
  if (host_.tracing()) {
    const Seconds at = now();
    trace_lane("recv<-" + std::to_string(message.header.sender), "receive", span_name(message.header), at, at,
               trace_message(message));
  }
  deliver(std::move(message));
}

void EpollNodeRuntime::on_error(const TransportError& error) {
  if (error.refused) {
    refuse(error.who, error.to_string());
    return;
  }
  ++transport_errors_;
  if (error.lost && error.lost_node != kNoNode) {
    if (halting()) return;  // peers close their connections as a job ends
    log(error.to_string());
    // Our connection to it goes too (now, not at our next send: the peer may be gone for good), and
    // anything we send it meanwhile is held (settle_lost, queue).
    if (connected_.contains(error.lost_node) && std::ranges::find(lost_, error.lost_node) == lost_.end()) {
      lost_.push_back(error.lost_node);
      post([this] { settle_lost(); });
    }
    return;
  }
  if (halting()) {
    log(error.to_string());
    return;
  }
  // The connection is gone with whatever it carried: the run cannot complete correctly.
  fail(error.to_string());
}

}  // namespace pstwin::realnet
