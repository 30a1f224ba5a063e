// Key-value apps: KVWorker pushes and pulls lists of (key, value) pairs, sliced by the servers' key
// ranges; KVServer answers them with a request handle of the application's own.
#ifndef PS_KV_APP_H_
#define PS_KV_APP_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ps/base.h"
#include "ps/simple_app.h"

namespace ps {

// Keys must be unique and sorted. lens[i], when given, is the number of values of keys[i]; otherwise
// every key has vals.size() / keys.size() values.
template <typename Val>
struct KVPairs {
  SArray<Key> keys;
  SArray<Val> vals;
  SArray<int> lens;
  int priority = 0;
};

template <typename Val>
class KVWorker : public SimpleApp {
 public:
  using SimpleApp::obj_;
  using Callback = std::function<void()>;
  using SlicedKVs = std::vector<std::pair<bool, KVPairs<Val>>>;
  // Splits `send` by `ranges` (one per server): sliced[i] = (whether server i gets anything, its part).
  using Slicer =
      std::function<void(const KVPairs<Val>& send, const std::vector<Range>& ranges, SlicedKVs* sliced)>;

  KVWorker(int app_id, int customer_id) {
    slicer_ = [](const KVPairs<Val>& send, const std::vector<Range>& ranges, SlicedKVs* sliced) {
      DefaultSlicer(send, ranges, sliced);
    };
    obj_ = std::make_unique<Customer>(app_id, customer_id, [this](const Message& msg) { Process(msg); });
  }
  ~KVWorker() override { obj_.reset(); }

  // Copies the data; returns at once. Wait(timestamp) or `cb` tells when the servers have it.
  int Push(const std::vector<Key>& keys, const std::vector<Val>& vals, const std::vector<int>& lens = {},
           int cmd = 0, const Callback& cb = nullptr, int priority = 0) {
    return ZPush(SArray<Key>(keys), SArray<Val>(vals), SArray<int>(lens), cmd, cb, priority);
  }
  // *vals (and *lens) are filled when Wait(timestamp) returns or `cb` runs; they may start empty.
  int Pull(const std::vector<Key>& keys, std::vector<Val>* vals, std::vector<int>* lens = nullptr,
           int cmd = 0, const Callback& cb = nullptr, int priority = 0) {
    return PullInto(SArray<Key>(keys), vals, lens, cmd, cb, priority);
  }
  // A push whose response carries each key's value after it (into *outs).
  int PushPull(const std::vector<Key>& keys, const std::vector<Val>& vals, std::vector<Val>* outs,
               std::vector<int>* lens = nullptr, int cmd = 0, const Callback& cb = nullptr,
               int priority = 0) {
    CHECK_NOTNULL(outs);
    if (outs->empty()) outs->resize(vals.size());
    CHECK_EQ(vals.size(), outs->size());
    return PushPullInto(SArray<Key>(keys), SArray<Val>(vals), outs, lens, cmd, cb, priority);
  }
  void Wait(int timestamp) { obj_->WaitRequest(timestamp); }

  // The zero-copy forms: the arrays are shared, not copied; leave them unchanged until finished.
  int ZPush(const SArray<Key>& keys, const SArray<Val>& vals, const SArray<int>& lens = {}, int cmd = 0,
            const Callback& cb = nullptr, int priority = 0) {
    const int ts = obj_->NewRequest(kServerGroup);
    AddCallback(ts, cb);
    KVPairs<Val> kvs;
    kvs.keys = keys;
    kvs.vals = vals;
    kvs.lens = lens;
    kvs.priority = priority;
    Send(ts, true, false, cmd, kvs);
    return ts;
  }
  int ZPull(const SArray<Key>& keys, SArray<Val>* vals, SArray<int>* lens = nullptr, int cmd = 0,
            const Callback& cb = nullptr, int priority = 0) {
    return PullInto(keys, vals, lens, cmd, cb, priority);
  }
  int ZPushPull(const SArray<Key>& keys, const SArray<Val>& vals, SArray<Val>* outs,
                SArray<int>* lens = nullptr, int cmd = 0, const Callback& cb = nullptr, int priority = 0) {
    return PushPullInto(keys, vals, outs, lens, cmd, cb, priority);
  }

  void set_slicer(const Slicer& slicer) {
    CHECK(slicer);
    slicer_ = slicer;
  }

 private:
  // Pull and ZPull: the values land in *vals (a std::vector or an SArray), lengths in *lens.
  template <typename C, typename D>
  int PullInto(const SArray<Key>& keys, C* vals, D* lens, int cmd, const Callback& cb, int priority) {
    const int ts = AddPullCB(keys, vals, lens, cmd, cb);
    KVPairs<Val> kvs;
    kvs.keys = keys;
    kvs.priority = priority;
    Send(ts, false, true, cmd, kvs);
    return ts;
  }
  // PushPull and ZPushPull: *lens carries the pushed lengths in and the pulled ones out.
  template <typename C, typename D>
  int PushPullInto(const SArray<Key>& keys, const SArray<Val>& vals, C* outs, D* lens, int cmd,
                   const Callback& cb, int priority) {
    const int ts = AddPullCB(keys, outs, lens, cmd, cb);
    KVPairs<Val> kvs;
    kvs.keys = keys;
    kvs.vals = vals;
    kvs.priority = priority;
    if (lens) kvs.lens = SArray<int>(*lens);
    Send(ts, true, true, cmd, kvs);
    return ts;
  }

  static void DefaultSlicer(const KVPairs<Val>& send, const std::vector<Range>& ranges, SlicedKVs* sliced) {
    sliced->assign(ranges.size(), std::pair<bool, KVPairs<Val>>());
    if (send.keys.empty()) return;
    // Values of keys [0, i): with lens, their sum; otherwise i values per key.
    const std::size_t per_key = send.lens.empty() ? send.vals.size() / send.keys.size() : 0;
    std::vector<std::size_t> val_pos(send.keys.size() + 1, 0);
    for (std::size_t i = 0; i < send.keys.size(); ++i)
      val_pos[i + 1] = val_pos[i] + (send.lens.empty() ? per_key : static_cast<std::size_t>(send.lens[i]));
    if (!send.vals.empty()) CHECK_EQ(val_pos.back(), send.vals.size()) << "values do not match the keys";
    for (std::size_t s = 0; s < ranges.size(); ++s) {
      const Range part = FindRange(send.keys, ranges[s].begin(), ranges[s].end());
      if (part.size() == 0) continue;
      auto& slice = (*sliced)[s];
      slice.first = true;
      slice.second.keys = send.keys.segment(part.begin(), part.end());
      if (!send.vals.empty())
        slice.second.vals = send.vals.segment(val_pos[part.begin()], val_pos[part.end()]);
      if (!send.lens.empty()) slice.second.lens = send.lens.segment(part.begin(), part.end());
    }
    std::size_t covered = 0;
    for (const auto& slice : *sliced) covered += slice.second.keys.size();
    CHECK_EQ(covered, send.keys.size()) << "keys must be sorted and below kMaxKey";
  }

  void AddCallback(int timestamp, const Callback& cb) {
    if (!cb) return;
    std::lock_guard<std::mutex> lock(mu_);
    callbacks_[timestamp] = cb;
  }
  void RunCallback(int timestamp) {
    Callback cb;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = callbacks_.find(timestamp);
      if (it == callbacks_.end()) return;
      cb = std::move(it->second);
      callbacks_.erase(it);
    }
    cb();
  }

  // Registers the gathering of a pull's responses into *vals (and *lens), in key order.
  template <typename C, typename D>
  int AddPullCB(const SArray<Key>& keys, C* vals, D* lens, int /*cmd*/, const Callback& cb) {
    const int ts = obj_->NewRequest(kServerGroup);
    AddCallback(ts, [this, ts, keys, vals, lens, cb]() mutable {
      std::vector<KVPairs<Val>> parts;
      {
        std::lock_guard<std::mutex> lock(mu_);
        parts = std::move(recv_kvs_[ts]);
        recv_kvs_.erase(ts);
      }
      std::sort(parts.begin(), parts.end(),
                [](const KVPairs<Val>& a, const KVPairs<Val>& b) { return a.keys.front() < b.keys.front(); });
      std::size_t total_keys = 0;
      std::size_t total_vals = 0;
      for (const auto& part : parts) {
        total_keys += part.keys.size();
        total_vals += part.vals.size();
      }
      CHECK_EQ(total_keys, keys.size())
          << "the servers answered " << total_keys << " of " << keys.size() << " keys";
      if (vals->empty())
        vals->resize(total_vals);
      else
        CHECK_EQ(vals->size(), total_vals) << "the pull's value buffer has the wrong size";
      Val* out = vals->data();
      for (const auto& part : parts) out = std::copy(part.vals.begin(), part.vals.end(), out);
      if (lens) {
        if (lens->empty())
          lens->resize(total_keys);
        else
          CHECK_EQ(lens->size(), total_keys);
        int* len_out = lens->data();
        for (const auto& part : parts) len_out = std::copy(part.lens.begin(), part.lens.end(), len_out);
      }
      if (cb) cb();
    });
    return ts;
  }

  void Send(int timestamp, bool push, bool pull, int cmd, const KVPairs<Val>& kvs) {
    SlicedKVs sliced;
    slicer_(kvs, Postoffice::Get()->GetServerKeyRanges(), &sliced);
    int skipped = 0;
    for (const auto& slice : sliced)
      if (!slice.first) ++skipped;
    obj_->AddResponse(timestamp, skipped);
    if (static_cast<std::size_t>(skipped) == sliced.size()) RunCallback(timestamp);
    for (std::size_t s = 0; s < sliced.size(); ++s) {
      if (!sliced[s].first) continue;
      Message msg;
      msg.meta.app_id = obj_->app_id();
      msg.meta.customer_id = obj_->customer_id();
      msg.meta.request = true;
      msg.meta.push = push;
      msg.meta.pull = pull;
      msg.meta.head = cmd;
      msg.meta.timestamp = timestamp;
      msg.meta.recver = Postoffice::ServerRankToID(static_cast<int>(s));
      msg.meta.priority = kvs.priority;
      const KVPairs<Val>& part = sliced[s].second;
      msg.AddData(part.keys);
      msg.AddData(part.vals);
      if (!part.lens.empty()) msg.AddData(part.lens);
      Postoffice::Get()->Send(msg);
    }
  }

  void Process(const Message& msg) override {
    if (msg.meta.simple_app) {
      SimpleApp::Process(msg);
      return;
    }
    const int ts = msg.meta.timestamp;
    if (msg.meta.pull && msg.data.size() >= 2) {
      KVPairs<Val> kvs;
      kvs.keys = msg.data[0];
      kvs.vals = msg.data[1];
      if (msg.data.size() > 2) kvs.lens = msg.data[2];
      if (!kvs.keys.empty()) {
        std::lock_guard<std::mutex> lock(mu_);
        recv_kvs_[ts].push_back(kvs);
      }
    }
    // The last response (the customer counts this one after Process returns) completes the request.
    if (obj_->NumResponse(ts) == Postoffice::Get()->num_servers() - 1) RunCallback(ts);
  }

  std::mutex mu_;
  std::unordered_map<int, std::vector<KVPairs<Val>>> recv_kvs_;
  std::unordered_map<int, Callback> callbacks_;
  Slicer slicer_;
};

// What a server's request handle is told about a request.
struct KVMeta {
  int cmd = 0;
  bool push = false;
  bool pull = false;
  int sender = 0;  // the worker's node id
  int timestamp = 0;
  int customer_id = 0;
};

template <typename Val>
class KVServer : public SimpleApp {
 public:
  using ReqHandle =
      std::function<void(const KVMeta& req_meta, const KVPairs<Val>& req_data, KVServer* server)>;

  explicit KVServer(int app_id) {
    obj_ = std::make_unique<Customer>(app_id, app_id, [this](const Message& msg) { Process(msg); });
  }
  ~KVServer() override { obj_.reset(); }

  void set_request_handle(const ReqHandle& request_handle) {
    CHECK(request_handle) << "invalid request handle";
    {
      const std::lock_guard<std::mutex> lock(handle_mutex_);
      request_handle_ = request_handle;
    }
    handle_set_.notify_all();
  }
  // Answers a request, now or later, from any thread: a pull's answer carries keys and values.
  void Response(const KVMeta& req, const KVPairs<Val>& res = KVPairs<Val>()) {
    Message msg;
    msg.meta.app_id = obj_->app_id();
    msg.meta.customer_id = req.customer_id;
    msg.meta.request = false;
    msg.meta.push = req.push;
    msg.meta.pull = req.pull;
    msg.meta.head = req.cmd;
    msg.meta.timestamp = req.timestamp;
    msg.meta.recver = req.sender;
    if (!res.keys.empty()) {
      msg.AddData(res.keys);
      msg.AddData(res.vals);
      if (!res.lens.empty()) msg.AddData(res.lens);
    }
    Postoffice::Get()->Send(msg);
  }

 private:
  void Process(const Message& msg) override {
    if (msg.meta.simple_app) {
      SimpleApp::Process(msg);
      return;
    }
    KVMeta meta;
    meta.cmd = msg.meta.head;
    meta.push = msg.meta.push;
    meta.pull = msg.meta.pull;
    meta.sender = msg.meta.sender;
    meta.timestamp = msg.meta.timestamp;
    meta.customer_id = msg.meta.customer_id;
    KVPairs<Val> data;
    if (!msg.data.empty()) {
      CHECK_GE(msg.data.size(), 2u) << "a key-value request without values";
      data.keys = msg.data[0];
      data.vals = msg.data[1];
      if (msg.data.size() > 2) data.lens = msg.data[2];
    }
    request_handle()(meta, data, this);
  }

  // The customer's thread delivers from the moment the server exists, and a worker's first request
  // may come before the application calls set_request_handle: it waits for the handle (ps-lite's
  // own check would fail the server in that window).
  // A reference: a handle may keep state (KVServerDefaultHandle's store), which a copy would lose.
  ReqHandle& request_handle() {
    std::unique_lock<std::mutex> lock(handle_mutex_);
    const bool set =
        handle_set_.wait_for(lock, std::chrono::seconds(30), [this] { return bool(request_handle_); });
    CHECK(set) << "KVServer: a request came and no request handle was set within 30 s (set_request_handle)";
    return request_handle_;
  }

  std::mutex handle_mutex_;
  std::condition_variable handle_set_;
  ReqHandle request_handle_;
};

// A handle that keeps one value per key: a push adds to it, a pull reads it (a push-pull does both).
template <typename Val>
struct KVServerDefaultHandle {
  void operator()(const KVMeta& req_meta, const KVPairs<Val>& req_data, KVServer<Val>* server) {
    const std::size_t n = req_data.keys.size();
    KVPairs<Val> res;
    if (req_meta.push) CHECK_EQ(n, req_data.vals.size()) << "the default handle keeps one value per key";
    if (req_meta.pull) {
      res.keys = req_data.keys;
      res.vals.resize(n);
    }
    for (std::size_t i = 0; i < n; ++i) {
      Val& stored = store[req_data.keys[i]];
      if (req_meta.push) stored += req_data.vals[i];
      if (req_meta.pull) res.vals[i] = stored;
    }
    server->Response(req_meta, res);
  }
  std::unordered_map<Key, Val> store;
};

}  // namespace ps

#endif  // PS_KV_APP_H_
