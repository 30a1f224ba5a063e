#include "simapp/app_simulation.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <simgrid/s4u.hpp>

#include "core/assert.hpp"
#include "ps/internal/postoffice.h"
#include "ps/resend.hpp"
#include "pslite/app_backend.hpp"
#include "sim/cluster.hpp"
#include "sim/platform.hpp"
#include "simapp/threads.hpp"

namespace pstwin::simapp {
namespace s4u = simgrid::s4u;

namespace {

using MainFunction = int (*)(int, char**);

// One node of the job: its own copy of the application (globals per process), environment,
// Postoffice and SimNode.
struct SimulatedProcess {
  std::string label;
  Role role = Role::kWorker;
  std::map<std::string, std::string> environment;
  MainFunction main = nullptr;
  pslite::PostofficePtr postoffice{nullptr, nullptr};
  sim::SimNode* node = nullptr;
  std::optional<int> status;  // what main returned
};

// dlopen's handles stay open until the process exits: the copies' code runs until then.
MainFunction load_copy(const std::filesystem::path& module, const std::filesystem::path& copy) {
  std::filesystem::copy_file(module, copy, std::filesystem::copy_options::overwrite_existing);
  void* handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::filesystem::remove(copy);
  if (!handle)
    throw std::runtime_error(module.string() + ": cannot load it as a shared module (" + dlerror() +
                             "); build the application with add_library(NAME MODULE ...), see docs/API.md");
  void* main = dlsym(handle, "main");
  if (!main)
    throw std::runtime_error(module.string() +
                             ": defines no main() (a ps-lite application's main, built "
                             "into a MODULE library)");
  return reinterpret_cast<MainFunction>(main);
}

class SimNodeLink final : public pslite::NodeLink {
 public:
  explicit SimNodeLink(sim::SimNode& node) : node_(node) {}
  bool post(std::function<void()> event) override {
    if (halted_ || node_.stopped()) return false;
    node_.post(std::move(event));
    return true;
  }
  void watch() override { node_.wait_stopped(); }
  void halt() override { halted_ = true; }

 private:
  sim::SimNode& node_;
  bool halted_ = false;
};

class SimulatedProcesses final : public pslite::AppBackend {
 public:
  SimulatedProcesses(const Scenario& scenario, std::vector<SimulatedProcess>& processes,
                     std::string scheduler_address)
      : scenario_(scenario), processes_(processes), scheduler_address_(std::move(scheduler_address)) {}

  ps::Postoffice& postoffice() override { return *current().postoffice; }
  std::map<std::string, std::string> environment() override { return current().environment; }
  std::unique_ptr<pslite::NodeLink> launch(const realnet::NodeEnv& /*env*/,
                                           const pslite::MakeAppProtocol& make) override {
    SimulatedProcess& process = current();
    process.node->attach(make(*process.node, scenario_, scheduler_address_));
    process.node->expect_watcher();  // the ps-lite facade waits for it to stop (SimNodeLink::watch)
    process.node->spawn(0);
    return std::make_unique<SimNodeLink>(*process.node);
  }

 private:
  SimulatedProcess& current() {
    const int index = current_process();
    PSTWIN_ASSERT(index >= 0 && static_cast<std::size_t>(index) < processes_.size(),
                  "a ps-lite call from an actor that is no simulated process's thread");
    return processes_[static_cast<std::size_t>(index)];
  }

  const Scenario& scenario_;
  std::vector<SimulatedProcess>& processes_;
  std::string scheduler_address_;
};

std::string address_of(std::string_view role, int rank, const std::string& host) {
  return std::string(role) + std::to_string(rank) + "@" + host;
}

}  // namespace

bool AppRun::ok() const {
  return report.ok() && std::all_of(processes.begin(), processes.end(),
                                    [](const auto& p) { return p.returned && p.status == 0; });
}

AppRun run_app_simulation(const Scenario& sc, const AppOptions& options,
                          const std::function<void(const AppRun&)>& publish) {
  if (sc.roles.validators > 0)
    throw ScenarioError("roles.validators = " + std::to_string(sc.roles.validators) +
                        ": a ps-lite application has a scheduler, servers and workers only; set it to 0");
  // The driver's own wall time, for results.json's wall_s only (as run_simulation's): nothing simulated reads
  // it.
  const auto wall_start = std::chrono::steady_clock::now();
  set_assertion_context("replay: " + options.replay);
  sim::EngineArguments arguments("pstwin-simapp");
  s4u::Engine engine(arguments.argc(), arguments.argv());
  // An application's own code runs on these stacks: as much as a thread would have.
  s4u::Engine::set_config("contexts/stack-size:" + std::to_string(std::max(sc.sim.stack_size_kb, 8192)));
  sim::configure_network_model(sc);
  for (const auto& setting : sc.sim.simgrid_config) s4u::Engine::set_config(setting);
  sim::Platform platform = sim::build_platform(sc);
  sim::Cluster cluster(sc, platform);

  // The job's processes, in node order, each with the DMLC_* variables its role would have.
  std::vector<SimulatedProcess> processes;
  const std::string scheduler_host = sc.scheduler_host_name();
  const std::string scheduler_address = "scheduler@" + scheduler_host;
  const auto add = [&](Role role, const std::string& label, const std::string& address,
                       const std::string& host) {
    SimulatedProcess process;
    process.label = label;
    process.role = role;
    process.environment = {{"DMLC_ROLE", std::string(role_name(role))},
                           {"DMLC_NUM_SERVER", std::to_string(sc.roles.servers)},
                           {"DMLC_NUM_WORKER", std::to_string(sc.roles.workers)},
                           {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                           {"DMLC_PS_ROOT_PORT", "9"}};
    process.postoffice = pslite::make_postoffice();
    process.node = &cluster.add_node(label, address, host);
    processes.push_back(std::move(process));
  };
  add(Role::kScheduler, "scheduler", scheduler_address, scheduler_host);
  for (int r = 0; r < sc.roles.servers; ++r) {
    const auto host = sc.server_host_name(r);
    add(Role::kServer, "server " + std::to_string(r), address_of("server", r, host), host);
  }
  for (int r = 0; r < sc.roles.workers; ++r) {
    const auto host = sc.worker_host_name(r);
    add(Role::kWorker, "worker " + std::to_string(r), address_of("worker", r, host), host);
    processes.back().environment["DMLC_WORKER_ID"] = std::to_string(r);
  }
  {
    const auto scratch =
        std::filesystem::temp_directory_path() / ("pstwin-simapp-" + std::to_string(getpid()));
    std::filesystem::create_directories(scratch);
    try {
      for (std::size_t i = 0; i < processes.size(); ++i)
        processes[i].main = load_copy(options.module, scratch / (std::to_string(i) + ".so"));
    } catch (...) {
      std::filesystem::remove_all(scratch);
      throw;
    }
    std::filesystem::remove_all(scratch);
  }

  SimulatedProcesses backend(sc, processes, scheduler_address);
  pslite::install_app_backend(&backend);
  AppRun run;
  const auto finish = [&] {
    run.report.scenario = sc.name;
    run.report.backend = "sim";
    run.report.seed = sc.seed;
    bool all_stopped = true;
    for (const auto& node : cluster.nodes()) all_stopped = all_stopped && node->stopped();
    const Seconds run_time =
        cluster.failed() || cluster.last_stop() > 0 ? cluster.last_stop() : s4u::Engine::get_clock();
    run.report.completed = all_stopped && !cluster.failed();
    if (cluster.failed()) {
      run.report.failure = cluster.failure();
    } else if (!all_stopped) {
      std::string stuck;
      for (const auto& node : cluster.nodes())
        if (!node->stopped()) stuck += "\n    " + node->describe();
      run.report.failure = "time limit " + std::to_string(sc.sim.max_time_s) +
                           " s (sim.max_time) reached before every node stopped:" + stuck;
    }
    if (const auto parked = describe_parked_threads(); !run.report.failure.empty() && !parked.empty()) {
      run.report.failure += "\n  the application's threads still waiting:";
      for (const auto& thread : parked) run.report.failure += "\n    " + thread.what;
    }
    cluster.fill(run.report, run_time);
    if (sc.faults.any() || sc.resend_enabled()) {
      FaultCounts counts = cluster.fault_counts();
      counts.resend_enabled = sc.resend_enabled();
      for (const auto& node : cluster.nodes()) add_resend_counts(node->protocol(), counts);
      run.report.faults = counts;
    }
    run.report.run_time_s = run_time;
    run.report.replay = options.replay;
    run.report.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    run.processes.clear();
    for (const auto& process : processes)
      run.processes.push_back({process.label, process.status.has_value(), process.status.value_or(0)});
  };
  // A failed node ends the run here: the application's threads are parked inside the C library's
  // functions (threads.hpp), where SimGrid cannot unwind them, so the process ends with the report.
  cluster.set_failure_handler([&] {
    finish();
    publish(run);
    std::fflush(nullptr);
    std::_Exit(1);
  });

  std::vector<std::string> labels;
  for (const auto& process : processes) labels.push_back(process.label);
  start_simulated_threads(std::move(labels));
  for (std::size_t i = 0; i < processes.size(); ++i) {
    SimulatedProcess& process = processes[i];
    std::vector<std::string> args{std::filesystem::path(options.module).filename().string()};
    if (options.role_argument) args.emplace_back(role_name(process.role));
    args.insert(args.end(), options.args.begin(), options.args.end());
    sim::create_actor(process.label + " main", process.node->host(), [&process, i, args] {
      adopt_current_actor(static_cast<int>(i));
      std::vector<std::string> storage = args;
      std::vector<char*> argv_of_main;
      for (auto& arg : storage) argv_of_main.push_back(arg.data());
      argv_of_main.push_back(nullptr);
      try {
        process.status = process.main(static_cast<int>(storage.size()), argv_of_main.data());
      } catch (const std::exception& error) {
        std::cerr << "pstwin-simapp: " << process.label << ": main threw: " << error.what() << "\n";
        process.status = 1;
      }
    });
  }
  engine.run_until(sc.sim.max_time_s);
  stop_simulated_threads();
  finish();
  publish(run);
  // Actors still parked (a stuck run) cannot be unwound (see above): end without tearing down.
  if (engine.get_actor_count() > 0) {
    std::fflush(nullptr);
    std::_Exit(run.ok() ? 0 : 1);
  }
  pslite::install_app_backend(nullptr);
  return run;
}

}  // namespace pstwin::simapp
