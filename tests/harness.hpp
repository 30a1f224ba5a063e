// A deterministic in-process Runtime for protocol unit tests: one global FIFO of events, virtual
// time that jumps to the next timer when nothing else is pending, executors that run tasks
// inline in submission order. No SimGrid, no threads: a test sees every step.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime.hpp"

namespace pstwin::testing {

class Harness;

class FakeRuntime final : public Runtime, public Executor, public StagingArea {
 public:
  FakeRuntime(Harness& harness, std::string address, std::string host)
      : harness_(harness), address_(std::move(address)), host_(std::move(host)) {}

  NodeId self() const override { return self_; }
  void set_self(NodeId id) override { self_ = id; }
  std::string local_address() const override { return address_; }
  std::string host_name() const override { return host_; }
  void connect(NodeId id, std::string_view address) override { peers_[id] = std::string(address); }
  void send(Message message) override;
  std::uint64_t next_sequence() override { return sequence_++; }
  void send_numbered(Message message) override;
  Seconds now() const override;
  TimerId start_timer(Seconds delay, std::function<void()> fire) override;
  void cancel_timer(TimerId id) override;
  RandomStream& random(std::string_view purpose) override {
    return randoms_.try_emplace(std::string(purpose), 7, purpose, 0).first->second;
  }
  Executor& executor(std::string_view, int) override { return *this; }
  StagingArea& staging() override { return *this; }
  void trace_span(std::string_view, std::string_view, Seconds, Seconds) override {}
  void log(std::string_view text) override { logs.emplace_back(text); }
  void stop() override { stopped = true; }
  // As the real backend: the protocol's last word (Node::on_failing) first, once.
  void fail(std::string text) override {
    if (node && !failing && !stopped) {
      failing = true;
      node->on_failing(text);
    }
    failure = std::move(text);
    stopped = true;
  }

  // Executor: inline, ordered.
  int lanes() const override { return 4; }
  void submit(int, std::string_view, ComputeCost, std::function<void()> work,
              std::function<void()> done) override;
  // StagingArea: one namespace per host, shared by the harness.
  std::shared_ptr<ByteBuffer> open(std::string_view name, std::size_t bytes) override;

  Node* node = nullptr;
  bool stopped = false;
  bool failing = false;
  std::string failure;
  std::vector<std::string> logs;
  std::vector<Message> sent;  // everything this node sent, in order

 private:
  Harness& harness_;
  std::string address_;
  std::string host_;
  NodeId self_ = kNoNode;
  std::map<NodeId, std::string> peers_;
  std::map<std::string, RandomStream> randoms_;
  std::uint64_t sequence_ = 1;
};

class Harness {
 public:
  FakeRuntime& add(std::string address, std::string host = "h0") {
    runtimes_.push_back(std::make_unique<FakeRuntime>(*this, std::move(address), std::move(host)));
    return *runtimes_.back();
  }
  void post(std::function<void()> event) { events_.push_back(std::move(event)); }
  void deliver(std::string_view address, Message message);
  TimerId add_timer(Seconds at, std::function<void()> fire) {
    const TimerId id = next_timer_++;
    timers_[{at, id}] = std::move(fire);
    return id;
  }
  void cancel(TimerId id) {
    for (auto it = timers_.begin(); it != timers_.end(); ++it)
      if (it->first.second == id) {
        timers_.erase(it);
        return;
      }
  }
  // Runs events (advancing virtual time to timers) until `until` says stop, or nothing is left,
  // or virtual time passes `max_time`.
  void run(const std::function<bool()>& until = {}, Seconds max_time = 1000);
  Seconds now() const { return now_; }
  std::shared_ptr<ByteBuffer> open(const std::string& host, std::string_view name, std::size_t bytes);
  // Drop messages sent to `address` (a node that is not there).
  std::vector<std::string> unreachable;
  // Messages for which this returns true are held back until release_held() (reordering on purpose).
  std::function<bool(std::string_view address, const Message&)> hold_if;
  void release_held();
  std::size_t held_count() const { return held_.size(); }

 private:
  std::vector<std::unique_ptr<FakeRuntime>> runtimes_;
  std::deque<std::function<void()>> events_;
  std::map<std::pair<Seconds, TimerId>, std::function<void()>> timers_;
  std::map<std::string, std::shared_ptr<ByteBuffer>> shm_;
  std::vector<std::pair<std::string, Message>> held_;
  TimerId next_timer_ = 1;
  Seconds now_ = 0;
};

}  // namespace pstwin::testing
