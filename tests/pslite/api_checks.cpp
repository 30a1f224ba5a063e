// A ps-lite application that uses what dmlc/ps-lite's own tests leave out, run as real processes by
// tests/pslite/run_job.py (2 servers, 3 workers): values of varying length (lens) across both servers'
// key ranges, callbacks, a request handle that answers later from a thread of its own, commands, worker
// barriers, ranks, and SimpleApp requests to the scheduler. A failed CHECK aborts the node, so the job
// fails.
//   api_checks kv     the checks
//   api_checks late-handle  the servers and the scheduler set their handles 1 s after making their apps,
//                           and each worker greets the scheduler at once too: early requests wait for
//                           the handle instead of going to the default one
//   api_checks crash  worker 1 dies after the start; every other node must end with the reason
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ps/ps.h"

namespace {

constexpr int kKvApp = 0;
constexpr int kHelloApp = 1;
constexpr int kDeferredCmd = 7;  // the server answers from another thread

// Keys in both servers' ranges (2 servers split [0, kMaxKey) in half), sorted, with their value counts.
const std::vector<ps::Key> kKeys{1, 1000, ps::kMaxKey / 2 + 5, ps::kMaxKey - 3};
const std::vector<int> kLens{1, 3, 2, 4};

// Worker `rank`'s values: value j of key i is (rank + 1) * (10 * i + j).
std::vector<float> values_of(int rank) {
  std::vector<float> vals;
  for (std::size_t i = 0; i < kKeys.size(); ++i)
    for (int j = 0; j < kLens[i]; ++j)
      vals.push_back(static_cast<float>((rank + 1) * (10 * static_cast<int>(i) + j)));
  return vals;
}

// Keeps a vector of values per key: a push adds element-wise, a pull answers with keys, values and lens.
class VectorStore {
 public:
  void operator()(const ps::KVMeta& meta, const ps::KVPairs<float>& data, ps::KVServer<float>* server) {
    ps::KVPairs<float> res;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::size_t at = 0;
      for (std::size_t i = 0; i < data.keys.size(); ++i) {
        auto& stored = store_[data.keys[i]];
        if (meta.push) {
          CHECK_EQ(data.lens.size(), data.keys.size()) << "every push of this app carries lens";
          const auto len = static_cast<std::size_t>(data.lens[i]);
          if (stored.empty()) stored.resize(len, 0);
          CHECK_EQ(stored.size(), len);
          for (std::size_t j = 0; j < len; ++j) stored[j] += data.vals[at + j];
          at += len;
        }
        if (meta.pull) {
          res.keys.push_back(data.keys[i]);
          res.lens.push_back(static_cast<int>(stored.size()));
          for (float v : stored) res.vals.push_back(v);
        }
      }
    }
    if (meta.cmd == kDeferredCmd) {
      std::lock_guard<std::mutex> lock(mutex_);
      answering_.emplace_back([server, meta, res] { server->Response(meta, res); });
    } else {
      server->Response(meta, res);
    }
  }
  ~VectorStore() {
    for (auto& thread : answering_) thread.join();
  }

 private:
  std::mutex mutex_;
  std::map<ps::Key, std::vector<float>> store_;
  std::vector<std::thread> answering_;
};

std::atomic<int> hellos{0};

void greet_the_scheduler(int rank) {
  ps::SimpleApp hello(kHelloApp, 0);
  hello.Wait(hello.Request(rank, "hello", ps::kScheduler));
}

void run_worker() {
  const int rank = ps::MyRank();
  CHECK(rank >= 0 && rank < ps::NumWorkers()) << "rank " << rank;
  ps::KVWorker<float> kv(kKvApp, 0);
  std::atomic<int> callbacks{0};
  const auto count = [&callbacks] { ++callbacks; };

  const std::vector<float> mine = values_of(rank);
  kv.Wait(kv.ZPush(ps::SArray<ps::Key>(kKeys), ps::SArray<float>(mine), ps::SArray<int>(kLens), 0, count));
  CHECK_EQ(callbacks.load(), 1) << "the push's callback ran before Wait returned";

  ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);  // every worker pushed

  std::vector<float> sum(mine.size(), 0);
  for (int r = 0; r < ps::NumWorkers(); ++r) {
    const auto theirs = values_of(r);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += theirs[i];
  }
  ps::SArray<float> pulled;
  ps::SArray<int> lens;
  kv.Wait(kv.ZPull(ps::SArray<ps::Key>(kKeys), &pulled, &lens, 0, count));
  CHECK_EQ(callbacks.load(), 2);
  CHECK_EQ(lens.size(), kLens.size());
  for (std::size_t i = 0; i < kLens.size(); ++i) CHECK_EQ(lens[i], kLens[i]) << "key " << kKeys[i];
  CHECK_EQ(pulled.size(), sum.size());
  for (std::size_t i = 0; i < sum.size(); ++i) CHECK_EQ(pulled[i], sum[i]) << "value " << i;

  ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);  // every worker pulled before anyone pushes again

  // Answered from the servers' own threads; the callback still runs before Wait returns. As in
  // ps-lite, *lens carries the pushed lengths in and the pulled ones out.
  std::vector<float> outs;
  std::vector<int> out_lens = kLens;
  kv.Wait(kv.PushPull(kKeys, mine, &outs, &out_lens, kDeferredCmd, count));
  CHECK_EQ(callbacks.load(), 3);
  CHECK_EQ(out_lens.size(), kLens.size());
  for (std::size_t i = 0; i < outs.size(); ++i)
    CHECK(outs[i] >= sum[i] + mine[i]) << "value " << i << ": " << outs[i] << " < " << sum[i] + mine[i];

  greet_the_scheduler(rank);
  LL << "api_checks: worker " << rank << " ok";
}

}  // namespace

int main(int argc, char* argv[]) {
  const std::string mode = argc > 1 ? argv[1] : "kv";
  ps::Start(0);
  if (mode == "crash" && ps::IsWorker() && ps::MyRank() == 1) std::_Exit(3);
  std::unique_ptr<ps::SimpleApp> hello_handler;
  if (ps::IsScheduler()) {
    hello_handler = std::make_unique<ps::SimpleApp>(kHelloApp, 0);
    if (mode == "late-handle") std::this_thread::sleep_for(std::chrono::seconds(1));
    hello_handler->set_request_handle([](const ps::SimpleData& req, ps::SimpleApp* app) {
      CHECK_EQ(req.body, "hello");
      CHECK_EQ(req.sender, ps::Postoffice::WorkerRankToID(req.head))
          << "the sender is the worker of that rank";
      ++hellos;
      app->Response(req);
    });
  }
  VectorStore store;  // outlives the server, whose handle uses it
  std::unique_ptr<ps::KVServer<float>> server;
  if (ps::IsServer()) {
    server = std::make_unique<ps::KVServer<float>>(kKvApp);
    // The workers' first requests reach the server before its handle is set: they wait for it.
    if (mode == "late-handle") std::this_thread::sleep_for(std::chrono::seconds(1));
    server->set_request_handle([&store](const ps::KVMeta& meta, const ps::KVPairs<float>& data,
                                        ps::KVServer<float>* s) { store(meta, data, s); });
  }
  if (ps::IsWorker()) {
    if (mode == "crash") {
      // Waits for a pull that worker 1, gone, never lets finish the job: the job must end anyway.
      ps::Postoffice::Get()->Barrier(0, ps::kWorkerGroup);
    } else {
      if (mode == "late-handle") greet_the_scheduler(ps::MyRank());
      run_worker();
    }
  }
  ps::Finalize(0, true);
  if (ps::IsScheduler()) CHECK_EQ(hellos.load(), (mode == "late-handle" ? 2 : 1) * ps::NumWorkers());
  return 0;
}
