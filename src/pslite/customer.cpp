#include "ps/internal/customer.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "ps/internal/postoffice.h"

namespace ps {

struct Customer::State {
  explicit State(RecvHandle recv) : handle(std::move(recv)) {}
  RecvHandle handle;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Message> queue;
  bool busy = false;  // a message was taken and is being handled
  bool stopping = false;
  bool held = false;  // accepted messages wait until the app is ready for them
  // Per timestamp (dense from 0): responses expected, responses counted.
  std::deque<std::pair<int, int>> tracker;  // a deque: a waiter holds a reference while others append
  std::thread thread;                       // last: started once the rest exists

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stopping || (!held && !queue.empty()); });
      if (stopping) return;
      Message message = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      handle(message);
      lock.lock();
      // A response counts once its handle ran, so Wait returns after the app saw it.
      if (!message.meta.request && message.meta.timestamp >= 0 &&
          static_cast<std::size_t>(message.meta.timestamp) < tracker.size())
        ++tracker[static_cast<std::size_t>(message.meta.timestamp)].second;
      busy = false;
      changed.notify_all();
    }
  }
};

Customer::Customer(int app_id, int customer_id, const RecvHandle& recv_handle, bool held)
    : app_id_(app_id), customer_id_(customer_id), state_(std::make_unique<State>(recv_handle)) {
  state_->held = held;
  // ps-lite's contract, not protocol code: a Customer runs the application's request handle on a
  // thread of its own (ps-lite's Customer::Receiving), fed from the node's event loop.
  state_->thread = std::thread([state = state_.get()] { state->run(); });
  Postoffice::Get()->AddCustomer(this);
}

Customer::~Customer() {
  Postoffice::Get()->RemoveCustomer(this);
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->changed.notify_all();
  // A handle that destroys its own app (an exit callback deleting a server) cannot join itself.
  if (state_->thread.get_id() == std::this_thread::get_id())
    state_->thread.detach();
  else
    state_->thread.join();
}

int Customer::NewRequest(int recver) {
  const auto expected = static_cast<int>(Postoffice::Get()->GetNodeIDs(recver).size());
  std::lock_guard lock(state_->mutex);
  state_->tracker.emplace_back(expected, 0);
  return static_cast<int>(state_->tracker.size() - 1);
}

void Customer::WaitRequest(int timestamp) {
  std::unique_lock lock(state_->mutex);
  CHECK(timestamp >= 0 && static_cast<std::size_t>(timestamp) < state_->tracker.size())
      << "Wait for timestamp " << timestamp << ", which no request of this app has";
  auto& entry = state_->tracker[static_cast<std::size_t>(timestamp)];
  state_->changed.wait(lock, [&] { return entry.second >= entry.first; });
}

int Customer::NumResponse(int timestamp) {
  std::lock_guard lock(state_->mutex);
  if (timestamp < 0 || static_cast<std::size_t>(timestamp) >= state_->tracker.size()) return 0;
  return state_->tracker[static_cast<std::size_t>(timestamp)].second;
}

void Customer::AddResponse(int timestamp, int num) {
  {
    std::lock_guard lock(state_->mutex);
    if (timestamp < 0 || static_cast<std::size_t>(timestamp) >= state_->tracker.size()) return;
    state_->tracker[static_cast<std::size_t>(timestamp)].second += num;
  }
  state_->changed.notify_all();
}

void Customer::Accept(const Message& recved) {
  {
    std::lock_guard lock(state_->mutex);
    state_->queue.push_back(recved);
  }
  state_->changed.notify_all();
}

void Customer::Release() {
  {
    std::lock_guard lock(state_->mutex);
    state_->held = false;
  }
  state_->changed.notify_all();
}

void Customer::WaitIdle() {
  Release();
  std::unique_lock lock(state_->mutex);
  state_->changed.wait(lock, [&] { return state_->queue.empty() && !state_->busy; });
}

}  // namespace ps
