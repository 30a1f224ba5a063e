// ps::Postoffice on pstwin's real backend: one LoopRuntime (the van named by DMLC_PS_VAN_TYPE) runs
// this process's node (AppNode or AppScheduler); the application's threads reach it through post().
#include "ps/internal/postoffice.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "ps/ids.hpp"
#include "ps/internal/customer.h"
#include "ps/resend.hpp"
#include "pslite/app_backend.hpp"
#include "pslite/app_node.hpp"
#include "pslite/wire.hpp"
#include "realnet/loop_runtime.hpp"
#include "realnet/node_address.hpp"
#include "realnet/node_env.hpp"
#include "realnet/van.hpp"
#include "scenario/scenario.hpp"

namespace ps {

using pstwin::NodeId;
using pstwin::Role;
namespace realnet = pstwin::realnet;
namespace pslite = pstwin::pslite;

namespace {

// How often the node's watcher looks for a stop or a failure.
constexpr auto kWatchPoll = std::chrono::milliseconds(50);

[[noreturn]] void exit_with(int status, const std::string& text) {
  std::cerr << "[pstwin] ps-lite node: " << text << std::endl;
  std::_Exit(status);
}

// The scheduler's application has started once the start barrier released every other node.
class StartWatch final : public pstwin::RunObserver {
 public:
  explicit StartWatch(pslite::AppEvents& events) : events_(events) {}
  void barrier_released(int group, pstwin::Seconds /*at*/) override {
    if (!started_) {
      started_ = true;
      events_.started(pstwin::kSchedulerId);
    } else {
      events_.barrier_released(group);
    }
  }

 private:
  pslite::AppEvents& events_;
  bool started_ = false;
};

// The real backend: the process's node on a LoopRuntime and the van of DMLC_PS_VAN_TYPE.
class RealNodeLink final : public pslite::NodeLink {
 public:
  RealNodeLink(realnet::NodeEnv env, const pslite::MakeAppProtocol& make) {
    try {
      realnet::resolve_node_address(env);
      scenario_ =
          pstwin::parse_scenario("", "the ps-lite application's environment", env.scenario_overrides());
    } catch (const std::exception& error) {
      exit_with(2, error.what());
    }
    const std::string label = env.role == Role::kScheduler ? "scheduler"
                              : env.role == Role::kServer  ? "server"
                                                           : "worker";
    host_ = std::make_unique<realnet::LocalHost>(realnet::LocalHost::Options{});
    try {
      runtime_ = realnet::make_node_runtime(env.van, *host_,
                                            realnet::NodeRuntimeOptions{.label = label,
                                                                        .seed = scenario_->seed,
                                                                        .bind = env.bind_address(),
                                                                        .linger_ms = 1000,
                                                                        .job_token = env.job_token,
                                                                        .encrypt = env.encrypt});
    } catch (const std::exception& error) {
      exit_with(2, error.what());
    }
    runtime_->attach(make(*runtime_, *scenario_, env.scheduler_address()));
    runtime_->start();
  }

  bool post(std::function<void()> event) override { return runtime_ && runtime_->post(std::move(event)); }

  // Ends the process with the node's failure (a peer died, the scheduler is gone): a ps-lite app would
  // wait forever; here every blocked call ends with the reason.
  void watch() override {
    for (;;) {
      const bool all_stopped = host_->wait_all_stopped(1, std::chrono::steady_clock::now() + kWatchPoll);
      if (host_->failed()) exit_with(1, host_->failure());
      if (all_stopped) return;
    }
  }
  void halt() override {
    runtime_->halt();
    runtime_.reset();
  }

 private:
  std::optional<pstwin::Scenario> scenario_;
  std::unique_ptr<realnet::LocalHost> host_;
  std::unique_ptr<realnet::LoopRuntime> runtime_;
};

pslite::AppBackend* app_backend = nullptr;  // the simulator's, or null: the real backend

}  // namespace

struct Postoffice::Node final : pslite::AppEvents {
  // Configuration, read once from the environment (a bad variable ends the process with status 2).
  const realnet::NodeEnv& env() {
    std::lock_guard lock(mutex);
    if (!node_env) {
      try {
        const auto environment = app_backend ? app_backend->environment() : realnet::process_environment();
        for (const auto& warning : realnet::check_env_names(environment))
          std::cerr << "[pstwin] ps-lite node: warning: " << warning << "\n";
        node_env =
            realnet::parse_node_env(realnet::node_variables(environment), {.worker_id_required = false});
      } catch (const std::exception& error) {
        exit_with(2, error.what());
      }
    }
    return *node_env;
  }

  void launch() {
    const auto& e = *node_env;
    if (e.role == Role::kValidator)
      exit_with(2,
                "DMLC_WORKER_TYPE=validator: a ps-lite application has schedulers, servers and workers only");
    // With ps.resend (on wherever the scenario injects loss, duplicates or partitions) the node sits
    // behind a Resender, as pstwin's own nodes do.
    const auto make = [this, &e](pstwin::Runtime& runtime, const pstwin::Scenario& scenario,
                                 const std::string& scheduler_address) {
      return pstwin::with_resend(
          runtime, scenario, std::string(pstwin::role_name(e.role)),
          [&](pstwin::Runtime& rt) -> std::unique_ptr<pstwin::Node> {
            if (e.role == Role::kScheduler) {
              watch = std::make_unique<StartWatch>(*this);
              auto scheduler =
                  std::make_unique<pstwin::Scheduler>(rt, pstwin::scheduler_options(scenario), *watch);
              auto node = std::make_unique<pslite::AppScheduler>(rt, std::move(scheduler), *this);
              app_scheduler = node.get();
              return node;
            }
            auto node = std::make_unique<pslite::AppNode>(
                pstwin::NodeContext{rt, no_observer, scheduler_address, pstwin::control_options(scenario)},
                e.role, e.role == Role::kWorker ? e.worker_id : -1, *this);
            app_node = node.get();
            return node;
          });
    };
    link = app_backend ? app_backend->launch(e, make) : std::make_unique<RealNodeLink>(e, make);
    // The ps-lite facade, not protocol code: ps-lite's API is blocking and threaded by contract (its
    // applications call it from their own threads), and this thread only waits for the node to end;
    // the protocol still runs on the node's event loop. (In the simulator the thread is an actor.)
    watcher = std::thread([this] { watch_node(); });
  }

  void watch_node() {
    link->watch();
    std::lock_guard lock(mutex);
    stopped = true;
    changed.notify_all();
  }

  // AppEvents, on the event loop.
  void started(NodeId self) override {
    std::lock_guard lock(mutex);
    my_id = static_cast<int>(self);
    ready = true;
    changed.notify_all();
  }
  void barrier_released(int group) override {
    std::lock_guard lock(mutex);
    ++barrier_generation[group];
    barrier_asked.erase(group);
    changed.notify_all();
  }
  void received(Message message) override { deliver(std::move(message)); }

  // To the customer of (app, customer) for a response; to the app's first customer for a request
  // (a server's KVServer answers every worker's customers). Held until that customer exists.
  void deliver(Message message) {
    std::lock_guard lock(customers_mutex);
    const int app = message.meta.app_id;
    if (message.meta.request) {
      const auto it = customers.lower_bound({app, 0});
      if (it != customers.end() && it->first.first == app)
        it->second->Accept(message);
      else
        held_requests[app].push_back(std::move(message));
    } else {
      const auto it = customers.find({app, message.meta.customer_id});
      if (it != customers.end())
        it->second->Accept(message);
      else
        held_responses[{app, message.meta.customer_id}].push_back(std::move(message));
    }
  }

  void add_customer(Customer* customer) {
    std::lock_guard lock(customers_mutex);
    const std::pair key{customer->app_id(), customer->customer_id()};
    CHECK(customers.emplace(key, customer).second) << "two customers with app_id " << key.first
                                                   << " and customer_id " << key.second << " in one process";
    if (const auto it = held_responses.find(key); it != held_responses.end()) {
      for (const auto& message : it->second) customer->Accept(message);
      held_responses.erase(it);
    }
    if (const auto it = held_requests.find(key.first); it != held_requests.end()) {
      for (const auto& message : it->second) customer->Accept(message);
      held_requests.erase(it);
    }
  }
  // A held customer (a SimpleApp whose app has not called it since it was made) delivers from here on.
  void release_customers() {
    std::lock_guard lock(customers_mutex);
    for (auto& [key, customer] : customers) customer->Release();
  }
  void remove_customer(Customer* customer) {
    std::lock_guard lock(customers_mutex);
    customers.erase({customer->app_id(), customer->customer_id()});
  }

  // Runs `event` on the node's event loop.
  void on_loop(std::function<void()> event) {
    if (!link || !link->post(std::move(event)))
      LOG(WARNING) << "a ps-lite call after this node stopped was dropped";
  }

  void wait_ready() {
    std::unique_lock lock(mutex);
    CHECK(link) << "call ps::Start before using the ps-lite API";
    changed.wait(lock, [&] { return ready; });
  }

  std::mutex mutex;
  std::condition_variable changed;
  std::optional<realnet::NodeEnv> node_env;
  pstwin::RunObserver no_observer;
  std::unique_ptr<StartWatch> watch;
  std::unique_ptr<pslite::NodeLink> link;
  pslite::AppNode* app_node = nullptr;            // owned by link's runtime
  pslite::AppScheduler* app_scheduler = nullptr;  // owned by link's runtime
  std::thread watcher;
  bool ready = false;
  bool stopped = false;
  bool finishing = false;  // the last customer's Finalize began stopping the node
  bool finished = false;   // the node stopped, its customers drained and the exit callbacks ran
  int my_id = 0;
  std::set<int> started_customers;
  std::set<int> finalized_customers;
  std::map<int, std::uint64_t> barrier_generation;
  std::set<int> barrier_asked;
  std::vector<std::function<void()>> exit_callbacks;
  std::vector<Range> server_ranges;

  std::mutex customers_mutex;
  std::map<std::pair<int, int>, Customer*> customers;
  std::map<int, std::vector<Message>> held_requests;
  std::map<std::pair<int, int>, std::vector<Message>> held_responses;

  // Postoffice's constructor and destructor are private (ps-lite's singleton); a simulated process's
  // comes from here. A naked new owned at once by the returned pointer: make_unique cannot reach them.
  static pslite::PostofficePtr make_postoffice() {
    return {new Postoffice(), [](Postoffice* postoffice) { delete postoffice; }};
  }
};

Postoffice* Postoffice::Get() {
  if (app_backend) return &app_backend->postoffice();
  static Postoffice postoffice;
  return &postoffice;
}

Postoffice::Postoffice() : node_(std::make_unique<Node>()) {}

Postoffice::~Postoffice() {
  // Its node's threads still run: ps-lite requires Finalize before the process ends.
  if (node_->watcher.joinable())
    exit_with(
        1, "the process is ending without ps::Finalize (every customer that called ps::Start must call it)");
}

void Postoffice::Start(int customer_id, const char* /*argv0*/, bool do_barrier) {
  node_->env();
  {
    std::lock_guard lock(node_->mutex);
    node_->started_customers.insert(customer_id);
    if (!node_->link) node_->launch();
  }
  if (do_barrier) node_->wait_ready();
}

void Postoffice::Finalize(int customer_id, bool do_barrier) {
  Node& node = *node_;
  node.release_customers();
  std::unique_lock lock(node.mutex);
  CHECK(node.link) << "ps::Finalize before ps::Start";
  node.finalized_customers.insert(customer_id);
  bool last = !node.finishing;
  for (int started : node.started_customers)
    if (!node.finalized_customers.contains(started)) last = false;
  if (!last) {
    node.changed.wait(lock, [&] { return node.finished; });
    return;
  }
  node.finishing = true;
  node.changed.wait(lock, [&] { return node.ready; });
  const Role role = node.node_env->role;
  // The node's events take node.mutex: none is posted while holding it.
  lock.unlock();
  if (role == Role::kScheduler) {
    node.on_loop([&node] { node.app_scheduler->local_finalized(); });
  } else {
    if (do_barrier) {
      lock.lock();
      const std::uint64_t generation = node.barrier_generation[pstwin::kAllGroups];
      lock.unlock();
      node.on_loop([&node] { node.app_node->request_barrier(pstwin::kAllGroups); });
      lock.lock();
      node.changed.wait(lock, [&] { return node.barrier_generation[pstwin::kAllGroups] > generation; });
      lock.unlock();
    }
    if (role == Role::kWorker) node.on_loop([&node] { node.app_node->announce_done(); });
  }
  lock.lock();
  node.changed.wait(lock, [&] { return node.stopped; });
  lock.unlock();
  node.watcher.join();
  node.link->halt();
  // Every message that reached a customer is handled before Finalize returns.
  std::vector<Customer*> customers;
  {
    std::lock_guard customers_lock(node.customers_mutex);
    for (auto& [key, customer] : node.customers) customers.push_back(customer);
  }
  for (Customer* customer : customers) customer->WaitIdle();
  std::vector<std::function<void()>> callbacks;
  lock.lock();
  callbacks.swap(node.exit_callbacks);
  lock.unlock();
  for (auto& callback : callbacks) callback();
  lock.lock();
  node.finished = true;
  node.changed.notify_all();
}

void Postoffice::RegisterExitCallback(const std::function<void()>& cb) {
  std::lock_guard lock(node_->mutex);
  node_->exit_callbacks.push_back(cb);
}

void Postoffice::Barrier(int /*customer_id*/, int node_group) {
  Node& node = *node_;
  node.wait_ready();
  node.release_customers();
  std::unique_lock lock(node.mutex);
  CHECK(node.node_env->role != Role::kScheduler)
      << "Postoffice::Barrier on the scheduler: pstwin's scheduler takes part in the start and Finalize "
         "barriers only (docs/API.md)";
  CHECK(node_group > 0 && node_group <= pstwin::kSchedulerGroup + pstwin::kServerGroup + pstwin::kWorkerGroup)
      << "Barrier of node group " << node_group << ": use kWorkerGroup, kServerGroup or their sum";
  CHECK(node_group & pstwin::group_of(node.node_env->role))
      << "Barrier of node group " << node_group << " from a " << pstwin::role_name(node.node_env->role)
      << ": a node takes part only in barriers of a group it belongs to";
  const std::uint64_t generation = node.barrier_generation[node_group];
  if (node.barrier_asked.insert(node_group).second) {
    lock.unlock();
    node.on_loop([&node, node_group] { node.app_node->request_barrier(node_group); });
    lock.lock();
  }
  node.changed.wait(lock, [&] { return node.barrier_generation[node_group] > generation; });
}

int Postoffice::num_workers() const {
  return node_->env().num_workers;
}
int Postoffice::num_servers() const {
  return node_->env().num_servers;
}
bool Postoffice::is_worker() const {
  return node_->env().role == Role::kWorker;
}
bool Postoffice::is_server() const {
  return node_->env().role == Role::kServer;
}
bool Postoffice::is_scheduler() const {
  return node_->env().role == Role::kScheduler;
}
int Postoffice::verbose() const {
  return node_->env().verbose;
}

int Postoffice::my_id() const {
  node_->wait_ready();
  std::lock_guard lock(node_->mutex);
  return node_->my_id;
}

int Postoffice::my_rank() const {
  return pstwin::rank_of(static_cast<NodeId>(my_id()));
}

std::vector<int> Postoffice::GetNodeIDs(int node_id) const {
  if (node_id > pstwin::kSchedulerGroup + pstwin::kServerGroup + pstwin::kWorkerGroup) return {node_id};
  std::vector<int> ids;
  if (node_id & pstwin::kSchedulerGroup) ids.push_back(static_cast<int>(pstwin::kSchedulerId));
  if (node_id & pstwin::kServerGroup)
    for (int r = 0; r < num_servers(); ++r) ids.push_back(ServerRankToID(r));
  if (node_id & pstwin::kWorkerGroup)
    for (int r = 0; r < num_workers(); ++r) ids.push_back(WorkerRankToID(r));
  return ids;
}

const std::vector<Range>& Postoffice::GetServerKeyRanges() {
  const auto servers = static_cast<Key>(num_servers());
  std::lock_guard lock(node_->mutex);
  if (node_->server_ranges.empty()) {
    for (Key i = 0; i < servers; ++i)
      node_->server_ranges.emplace_back(kMaxKey / servers * i, kMaxKey / servers * (i + 1));
  }
  return node_->server_ranges;
}

void Postoffice::Send(const Message& msg) {
  Node& node = *node_;
  node.wait_ready();
  Message message = msg;
  message.meta.sender = my_id();
  if (message.meta.recver == message.meta.sender) {
    node.deliver(std::move(message));
    return;
  }
  pstwin::Message frame;
  try {
    frame = pslite::to_wire(message);
  } catch (const std::invalid_argument& error) {
    LOG(FATAL) << error.what();
  }
  node.on_loop([&node, frame = std::move(frame)]() mutable {
    if (node.app_node)
      node.app_node->send_app(std::move(frame));
    else
      node.app_scheduler->send_app(std::move(frame));
  });
}

void Postoffice::AddCustomer(Customer* customer) {
  node_->add_customer(customer);
}
void Postoffice::RemoveCustomer(Customer* customer) {
  node_->remove_customer(customer);
}

}  // namespace ps

namespace pstwin::pslite {

void install_app_backend(AppBackend* backend) {
  ps::app_backend = backend;
}

PostofficePtr make_postoffice() {
  return ps::Postoffice::Node::make_postoffice();
}

}  // namespace pstwin::pslite
