// A ps-lite application whose worker process runs two customers on threads of its own (ps-lite's
// multi-worker mode, as its tests/test_kv_app_multi_workers.cc), hands a value from one thread to the
// other through a mutex and condition variable of its own, and sleeps. Run as real processes
// (run_job.py --worker-processes=1 --role-arg) and in the simulator (pstwin-simapp --role-arg), where
// the threads are actors, the handoff parks one of them and the sleep takes simulated time.
//   customers_app ROLE         the checks
//   customers_app ROLE stall   the servers never answer a pull: the worker waits for ever (the
//                              simulator must end the run at sim.max_time, naming what each thread waits for)
//   customers_app ROLE check   customer 1's check of the handed-over sum fails: the process aborts
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ps/ps.h"

namespace {

constexpr int kCustomers = 2;
constexpr int kKeys = 64;
constexpr int kRounds = 5;

// The worker threads' handoff: customer 0 publishes the sum it pulled, customer 1 waits for it.
std::mutex handoff_mutex;
std::condition_variable handoff_ready;
std::optional<double> handoff;
bool failing_check = false;  // mode "check"

void run_customer(int customer) {
  ps::Start(customer);
  ps::KVWorker<float> kv(0, customer);
  // Each customer's keys (interleaved, so both servers hold some of each) and values.
  std::vector<ps::Key> keys(kKeys);
  std::vector<float> vals(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    keys[i] = ps::kMaxKey / kKeys * i + customer;
    vals[i] = static_cast<float>(i + 100 * customer);
  }
  std::vector<int> pushes;
  for (int r = 0; r < kRounds; ++r) pushes.push_back(kv.Push(keys, vals));
  for (int ts : pushes) kv.Wait(ts);
  std::vector<float> pulled;
  kv.Wait(kv.Pull(keys, &pulled));
  CHECK_EQ(pulled.size(), vals.size());
  double sum = 0;
  for (int i = 0; i < kKeys; ++i) {
    CHECK_EQ(pulled[i], vals[i] * kRounds) << "customer " << customer << ", key " << i;
    sum += pulled[i];
  }
  if (customer == 0) {
    {
      std::lock_guard<std::mutex> lock(handoff_mutex);
      handoff = sum;
    }
    handoff_ready.notify_all();
  } else {
    std::unique_lock<std::mutex> lock(handoff_mutex);
    CHECK(handoff_ready.wait_for(lock, std::chrono::seconds(60), [] { return handoff.has_value(); }))
        << "customer 0 never handed its sum over";
    double expected = 0;
    for (int i = 0; i < kKeys; ++i) expected += static_cast<double>(i) * kRounds;
    CHECK_EQ(*handoff, failing_check ? expected + 1 : expected) << "the sum customer 0 handed over";
    lock.unlock();
    // Simulated time in the simulator: the run lasts at least this long.
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  LL << "customers_app: customer " << customer << " ok";
  ps::Finalize(customer, true);
}

}  // namespace

int main(int argc, char* argv[]) {
  CHECK_GE(argc, 2) << "usage: customers_app ROLE [stall]";
  const bool stall = argc > 2 && std::strcmp(argv[2], "stall") == 0;
  failing_check = argc > 2 && std::strcmp(argv[2], "check") == 0;
  if (std::strcmp(argv[1], "worker") != 0) {
    ps::Start(0);
    std::unique_ptr<ps::KVServer<float>> server;  // outlives Finalize, as in ps-lite's exit callback
    if (ps::IsServer()) {
      server = std::make_unique<ps::KVServer<float>>(0);
      if (stall)
        server->set_request_handle(
            [](const ps::KVMeta& meta, const ps::KVPairs<float>&, ps::KVServer<float>* s) {
              if (meta.push) s->Response(meta);  // pulls stay unanswered
            });
      else
        server->set_request_handle(ps::KVServerDefaultHandle<float>());
    }
    ps::Finalize(0, true);
    return 0;
  }
  std::vector<std::thread> customers;
  for (int c = 0; c < kCustomers; ++c) customers.emplace_back(run_customer, c);
  for (auto& thread : customers) thread.join();
  return 0;
}
