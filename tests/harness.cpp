#include "harness.hpp"

#include <algorithm>

namespace pstwin::testing {

void FakeRuntime::send(Message message) {
  message.header.sequence = sequence_++;
  send_numbered(std::move(message));
}

void FakeRuntime::send_numbered(Message message) {
  message.header.sender = self_;
  sent.push_back(message);
  auto peer = peers_.find(message.header.recipient);
  if (peer == peers_.end()) {
    fail("no address for node " + std::to_string(message.header.recipient));
    return;
  }
  message.payload = message.payload.frozen();
  harness_.deliver(peer->second, std::move(message));
}

Seconds FakeRuntime::now() const {
  return harness_.now();
}

TimerId FakeRuntime::start_timer(Seconds delay, std::function<void()> fire) {
  return harness_.add_timer(harness_.now() + delay, [this, fire = std::move(fire)] {
    if (!stopped) fire();
  });
}

void FakeRuntime::cancel_timer(TimerId id) {
  harness_.cancel(id);
}

void FakeRuntime::submit(int, std::string_view, ComputeCost, std::function<void()> work,
                         std::function<void()> done) {
  harness_.post([this, work = std::move(work), done = std::move(done)] {
    if (stopped) return;
    if (work) work();
    if (done) done();
  });
}

std::shared_ptr<ByteBuffer> FakeRuntime::open(std::string_view name, std::size_t bytes) {
  return harness_.open(host_, name, bytes);
}

void Harness::deliver(std::string_view address, Message message) {
  if (std::find(unreachable.begin(), unreachable.end(), address) != unreachable.end()) return;
  if (hold_if && hold_if(address, message)) {
    held_.emplace_back(std::string(address), std::move(message));
    return;
  }
  for (auto& rt : runtimes_)
    if (rt->local_address() == address) {
      FakeRuntime* target = rt.get();
      post([target, message = std::move(message)]() mutable {
        if (!target->stopped && target->node) target->node->on_message(std::move(message));
      });
      return;
    }
}

void Harness::release_held() {
  auto held = std::move(held_);
  held_.clear();
  const auto hold = std::move(hold_if);
  hold_if = nullptr;
  for (auto& [address, message] : held) deliver(address, std::move(message));
}

void Harness::run(const std::function<bool()>& until, Seconds max_time) {
  while (!(until && until())) {
    if (!events_.empty()) {
      auto event = std::move(events_.front());
      events_.pop_front();
      event();
      continue;
    }
    if (timers_.empty()) return;
    auto first = timers_.begin();
    if (first->first.first > max_time) return;
    now_ = std::max(now_, first->first.first);
    auto fire = std::move(first->second);
    timers_.erase(first);
    fire();
  }
}

std::shared_ptr<ByteBuffer> Harness::open(const std::string& host, std::string_view name, std::size_t bytes) {
  auto& region = shm_[host + "/" + std::string(name)];
  if (!region || region->size() != bytes) region = std::make_shared<ByteBuffer>(bytes);
  return region;
}

}  // namespace pstwin::testing
