#include "realnet/job_run.hpp"
#include "realnet/job_auth.hpp"
#include "realnet/job_children.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "ps/workload.hpp"
#include "realnet/link_sampler.hpp"
#include "realnet/netns_cluster.hpp"
#include "realnet/shm_staging.hpp"
#include "report/run_recorder.hpp"

namespace pstwin::realnet {
namespace {

using Clock = std::chrono::steady_clock;

// Without namespaces every byte crosses loopback: each scenario host's `.up`/`.down` stand for the
// message bytes its nodes sent/received (same-host traffic included, which the simulator leaves out).
// Nothing emulated the scenario's bandwidth, so the links carry bytes and no utilisation.
std::vector<LinkUsage> loopback_links(const Scenario& sc, const std::vector<NodePart>& parts) {
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_host;
  for (const auto& part : parts) {
    if (part.rank < 0 && part.role != Role::kScheduler) continue;  // never joined: no host
    const std::string host = part.role == Role::kScheduler   ? sc.scheduler_host_name()
                             : part.role == Role::kServer    ? sc.server_host_name(part.rank)
                             : part.role == Role::kValidator ? sc.validator_host_name(part.rank)
                                                             : sc.worker_host_name(part.rank);
    by_host[host].first += part.bytes_sent;
    by_host[host].second += part.bytes_received;
  }
  std::vector<LinkUsage> links;
  for (int h = 0; h < sc.host_count(); ++h) {
    const std::string name = sc.host_name(h);
    const auto [up, down] = by_host[name];
    links.push_back({name + ".up", up});
    links.push_back({name + ".down", down});
  }
  return links;
}

// On a namespace cluster every link is shaped to the scenario's bandwidth, so the simulator's closed
// form applies to the real run too (not on loopback: nothing is shaped there). The bandwidth factor is
// the scenario's network.bandwidth_factor, or else what tbf lets through as TCP payload: it counts
// Ethernet frames, 1448 B of payload (MSS with timestamps) per 1514 B frame. Latency: the scenario's
// (netns does not emulate it; it adds microseconds). No cross-traffic term: the factor covers ACKs.
// What of a tbf-shaped link's rate carries payload: network.bandwidth_factor, or 1448 B of TCP payload
// per 1514 B Ethernet frame where unset.
double shaped_payload_factor(const Scenario& sc) {
  constexpr double kTcpPayloadPerFrame = 1448.0 / 1514.0;
  return sc.network.bandwidth_factor > 0 ? sc.network.bandwidth_factor : kTcpPayloadPerFrame;
}

std::optional<Bound> shaped_bound(const Scenario& sc, const RunReport& report) {
  if (sc.workload.kind == WorkloadKind::kMlp) return std::nullopt;  // compute is FLOPs, not workload.compute
  const double factor = shaped_payload_factor(sc);
  const SyntheticWorkload workload(sc);
  const bool balanced = sc.lb.balancing == Balancing::kLb;
  auto bound =
      (balanced ? balanced_bound : analytic_bound)(sc, workload, factor, sc.network.latency_factor, 0);
  if (bound)
    bound->achieved_s =
        balanced && report.balancing ? report.balancing->balanced_mean_s : report.mean_iteration_s();
  return bound;
}

// The push/pull phase (docs/FPT.md, "Namespace clusters"): for each iteration counted, from the
// earliest worker's start (after workload.compute) to the latest worker's end, on the steady clock;
// the union over the iterations. Counted: with ps.balancing = "lb" the iterations that ran a
// balanced decision (not the probes), else every iteration.
std::vector<std::pair<double, double>> push_pull_phase(const Scenario& sc, const std::vector<NodePart>& parts,
                                                       const std::optional<BalancingReport>& balancing) {
  std::set<std::uint32_t> counted;
  if (balancing)
    for (const auto& d : balancing->decisions)
      if (!d.probe) counted.insert(d.iteration);
  std::map<std::uint32_t, std::pair<double, double>> windows;
  for (const auto& part : parts) {
    if (part.role != Role::kWorker) continue;
    for (const auto& it : part.iterations) {
      if (balancing && !counted.contains(it.index)) continue;
      const double from = part.epoch_s + it.start_s + sc.workload.compute_s, to = part.epoch_s + it.end_s;
      const auto [w, fresh] = windows.try_emplace(it.index, from, to);
      if (!fresh) w->second = {std::min(w->second.first, from), std::max(w->second.second, to)};
    }
  }
  std::vector<std::pair<double, double>> intervals;
  for (const auto& [index, window] : windows) intervals.push_back(window);
  return merged(std::move(intervals));
}

// links as NetnsCluster::link_usage lists them: host i's `.up` at 2i, `.down` at 2i + 1.
void add_phase_utilisation(const std::vector<std::pair<double, double>>& phase, const CounterSeries& series,
                           std::vector<LinkUsage>& links) {
  if (phase.empty() || series.empty()) return;
  for (std::size_t i = 0; i < links.size(); ++i)
    links[i].phase_utilization =
        utilisation_over(series, i / 2, i % 2 == 1, links[i].bandwidth_Bps.value_or(0), phase);
}

// Utilisation over time from the sampled counters: 100 buckets over [from_s, to_s) (steady clock).
void add_utilisation_over_time(const CounterSeries& series, double from_s, double to_s,
                               std::vector<LinkUsage>& links) {
  constexpr int kBuckets = 100;
  if (series.empty() || to_s <= from_s) return;
  const double width = (to_s - from_s) / kBuckets;
  for (std::size_t i = 0; i < links.size(); ++i) {
    const double bandwidth = links[i].bandwidth_Bps.value_or(0);
    if (bandwidth <= 0) continue;
    links[i].over_time_width_s = width;
    for (int b = 0; b < kBuckets; ++b) {
      const double from = from_s + b * width;
      links[i].over_time.push_back(series.bytes(i / 2, i % 2 == 1, from, from + width) / (bandwidth * width));
    }
  }
}

}  // namespace

RunReport run_job(const Scenario& sc, const JobRunOptions& options) {
  const auto wall_start = Clock::now();
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  const std::string binary = options.binary.empty() ? std::string("/proc/self/exe") : options.binary;
  std::filesystem::create_directories(options.parts_dir);
  for (const auto& entry : std::filesystem::directory_iterator(options.parts_dir))
    if (entry.path().extension() == ".json" || entry.path().extension() == ".log")
      std::filesystem::remove(entry.path());

  // The environment of every node: this process's, without BytePS/ps-lite variables, plus the job's.
  std::vector<std::string> base_env = environment_without_job_variables();
  // A fresh secret per job: its nodes prove it on every connection, so nothing else joins the job.
  base_env.push_back("PSTWIN_JOB_TOKEN=" + JobKey::random_token());
  // The port also names this job's shared-memory staging objects, so it is picked on this host even
  // when the nodes run in namespaces of their own.
  const int port = free_local_port();
  // Each node unlinks the staging objects it created when it exits; one that was killed cannot. The
  // job's objects share its prefix (realnet/node_run.cpp), so they go with the job, after every child
  // is reaped (`children` below is destroyed first).
  struct StagingSweep {
    std::string prefix;
    ~StagingSweep() { ShmStaging::unlink_all(prefix); }
  } const staging_sweep{job_staging_prefix(port)};
  std::optional<NetnsCluster> cluster;
  if (options.netns)
    cluster.emplace(sc, NetnsCluster::prefix_for(::getpid()), options.log, staging_sweep.prefix);
  // Every link's kernel counters through the run, for its utilisation over the push/pull phase.
  std::optional<LinkSampler> sampler;
  if (cluster) {
    std::vector<std::string> ports;
    for (const auto& h : cluster->hosts()) ports.push_back(h.name);
    sampler.emplace(cluster->switch_netns_fd(), std::move(ports), std::chrono::milliseconds(2));
  }
  const std::string root_uri = cluster ? cluster->host(sc.scheduler_host_name()).address : "127.0.0.1";
  base_env.insert(base_env.end(),
                  {"DMLC_PS_ROOT_URI=" + root_uri, "DMLC_PS_ROOT_PORT=" + std::to_string(port),
                   "DMLC_NUM_WORKER=" + std::to_string(sc.roles.workers),
                   "DMLC_NUM_SERVER=" + std::to_string(sc.roles.servers), "PS_VERBOSE=0",
                   "BYTEPS_FORCE_DISTRIBUTED=1", "DMLC_PS_VAN_TYPE=" + std::string(van_name(options.van))});
  if (sc.roles.validators > 0)
    base_env.push_back("DMLC_NUM_VALIDATOR=" + std::to_string(sc.roles.validators));
  base_env.push_back(std::string("PSTWIN_ENCRYPT=") + (options.encrypt ? "curve" : "none"));
  // Namespace hosts share one kernel, so UCX would see shared memory between them and carry their
  // bytes past the emulated links (its shared-memory transports also fail across namespaces): TCP
  // only, unless the user chose UCX_TLS.
  if (cluster && options.van == Van::kUcx && std::getenv("UCX_TLS") == nullptr)
    base_env.push_back("UCX_TLS=tcp");

  struct Spec {
    std::string name;
    std::string role;
    std::string host;  // scenario host: its namespace with --netns
    int worker_id = -1;
    int validator_id = -1;
  };
  std::vector<Spec> specs{{"scheduler", "scheduler", sc.scheduler_host_name()}};
  // A server's rank comes from the scheduler: the file is named by spawn order.
  for (int s = 0; s < sc.roles.servers; ++s)
    specs.push_back({"server" + std::to_string(s), "server", sc.server_host_name(s)});
  for (int w = 0; w < sc.roles.workers; ++w)
    specs.push_back({"worker" + std::to_string(w), "worker", sc.worker_host_name(w), w});
  for (int v = 0; v < sc.roles.validators; ++v)
    specs.push_back({"validator" + std::to_string(v), "worker", sc.validator_host_name(v), -1, v});

  const std::filesystem::path dir(options.parts_dir);
  log("scheduler on " + root_uri + ":" + std::to_string(port) + ", node reports and logs in " +
      options.parts_dir);
  const auto spawn_start = Clock::now();
  // faults.partitions of hosts, made by the switch (--kernel-partitions): cut and healed on the job's
  // clock from the loop below.
  struct KernelCut {
    int id;
    const PartitionFault* partition;
    bool cut = false;
    bool healed = false;
  };
  std::vector<KernelCut> kernel_cuts_due;
  const bool kernel_cuts = options.kernel_partitions && cluster;
  if (kernel_cuts)
    for (std::size_t i = 0; i < sc.faults.partitions.size(); ++i)
      if (!sc.faults.partitions[i].side.hosts.empty())
        kernel_cuts_due.push_back({static_cast<int>(i), &sc.faults.partitions[i]});
  auto apply_kernel_cuts = [&] {
    const double t = std::chrono::duration<double>(Clock::now() - spawn_start).count();
    for (auto& k : kernel_cuts_due) {
      std::string hosts;
      for (const auto& h : k.partition->side.hosts) hosts += (hosts.empty() ? "" : ", ") + h;
      if (!k.cut && t >= k.partition->from_s) {
        cluster->cut(k.id, k.partition->side.hosts);
        k.cut = true;
        log("faults.partitions entry " + std::to_string(k.id) + ": the switch cuts " + hosts + " off at " +
            format_seconds(t));
      }
      if (k.cut && !k.healed && t >= k.partition->until_s) {
        cluster->heal(k.id);
        k.healed = true;
        log("faults.partitions entry " + std::to_string(k.id) + ": " + hosts + " joined again at " +
            format_seconds(t));
      }
    }
  };
  const LauncherSignals signals;
  std::vector<std::unique_ptr<JobChild>> children;  // destroyed (killed and reaped) on any exit path
  for (const auto& spec : specs) {
    std::vector<std::string> env = base_env;
    env.push_back("DMLC_ROLE=" + spec.role);
    // Host-local resources (staging in /dev/shm) are the scenario host's, as in the simulator: every
    // emulated host shares this machine's /dev/shm, namespaces or not.
    env.push_back("PSTWIN_HOST=" + spec.host);
    if (kernel_cuts) env.push_back("PSTWIN_PARTITIONS=kernel");
    // One clock for the job's [faults] windows: the steady clock, which every process here shares.
    env.push_back(
        "PSTWIN_JOB_START=" +
        std::to_string(
            std::chrono::duration_cast<std::chrono::nanoseconds>(spawn_start.time_since_epoch()).count()));
    if (spec.worker_id >= 0) env.push_back("DMLC_WORKER_ID=" + std::to_string(spec.worker_id));
    if (spec.validator_id >= 0)
      env.insert(env.end(),
                 {"DMLC_WORKER_TYPE=validator", "DMLC_VALIDATOR_ID=" + std::to_string(spec.validator_id)});
    if (cluster) {
      env.push_back("DMLC_NODE_HOST=" + cluster->host(spec.host).address);
      // The payload rate of the host's shaped link: the epoll van paces (and shapes received)
      // connections to shares of it. The nominal rate, which counts frame headers and the reverse
      // ACKs too, gave each light connection ~6 % over its share, taken from the heaviest one.
      const double payload_Bps = sc.host_link(spec.host).bandwidth_Bps * shaped_payload_factor(sc);
      env.push_back("PSTWIN_NIC_RATE=" + std::to_string(std::llround(payload_Bps)));
    }
    // Not -q: each node's log keeps its summary line (and any failure) for parts/<name>.log.
    std::vector<std::string> args{"--scenario", options.scenario_path, "--report",
                                  (dir / (spec.name + ".json")).string()};
    for (const auto& set : options.sets) args.insert(args.end(), {"--set", set});
    if (options.seed) args.insert(args.end(), {"--set", "seed=" + std::to_string(*options.seed)});
    std::vector<std::string> argv{binary, "node"};
    argv.insert(argv.end(), args.begin(), args.end());
    if (!options.command.empty()) argv = options.command;
    children.push_back(
        std::make_unique<JobChild>(JobChild::Spec{.name = spec.name,
                                                  .argv = std::move(argv),
                                                  .env = std::move(env),
                                                  .stdout_path = (dir / (spec.name + ".log")).string(),
                                                  .stderr_path = "",
                                                  .netns_fd = cluster ? cluster->netns_fd(spec.host) : -1,
                                                  .stdin_fd = -1}));
    log("started " + spec.name + " (pid " + std::to_string(children.back()->pid()) + ")");
  }

  // SIGINT/SIGTERM to the launcher: every node killed, everything made removed, exit 128 + signal.
  auto exit_on_signal = [&] {
    const int sig = signals.caught();
    for (auto& child : children) child->kill();
    ShmStaging::unlink_all(staging_sweep.prefix);  // std::exit skips the sweep's destructor
    sampler.reset();
    cluster.reset();  // std::exit runs no destructors of this frame
    log(std::string("interrupted by signal ") + std::to_string(sig) + ": killed every node");
    if (options.on_interrupt) options.on_interrupt();
    std::exit(128 + sig);
  };
  ChildWatch watch;
  watch.report = [&](std::size_t i) { return read_part_file((dir / (specs[i].name + ".json")).string()); };
  watch.label = [&](std::size_t i) { return specs[i].name; };
  watch.log_path = [&](std::size_t i) { return (dir / (specs[i].name + ".log")).string(); };
  watch.ask_to_stop = [&](std::size_t i) { children[i]->terminate(); };
  if (kernel_cuts)
    watch.each_turn = [&]() -> std::string {
      try {
        apply_kernel_cuts();
        return "";
      } catch (const NetnsError& e) {
        return e.what();
      }
    };
  watch.log = log;
  watch.on_signal = exit_on_signal;
  std::string failure = watch_children(children, signals, wall_start, sc.run.time_limit_s, watch);
  if (signals.caught() != 0) exit_on_signal();  // while the nodes were stopping: no longer waited for
  children.clear();
  const double job_s = std::chrono::duration<double>(Clock::now() - spawn_start).count();
  std::vector<LinkUsage> links;
  CounterSeries series;
  if (cluster) {
    series = sampler->stop();
    if (!sampler->error().empty()) log("link counters not sampled: " + sampler->error());
    links = cluster->link_usage(job_s);
    cluster->add_losses(links);
    cluster.reset();
  }

  if (!options.command.empty()) {
    // The application's nodes write no pstwin reports: the job is its processes' exit statuses.
    RunReport report;
    report.scenario = sc.name;
    report.backend = "real";
    report.completed = failure.empty();
    report.failure = failure;
    report.van = std::string(van_name(options.van));
    report.wall_s = std::chrono::duration<double>(Clock::now() - wall_start).count();
    report.run_time_s = report.wall_s;
    return report;
  }
  std::vector<NodePart> parts;
  for (const auto& spec : specs) {
    auto part = read_part_file((dir / (spec.name + ".json")).string());
    if (part)
      parts.push_back(std::move(*part));
    else if (failure.empty())
      failure = spec.name + " wrote no report (see " + (dir / (spec.name + ".log")).string() + ")";
  }
  RunReport report = merge_parts(sc, parts, failure);
  if (options.seed) report.replay = replay_command(sc, options.seed, "run");
  report.van = std::string(van_name(options.van));
  report.wall_s = std::chrono::duration<double>(Clock::now() - wall_start).count();
  report.run_time_s = report.wall_s;
  if (options.netns) {
    report.links = std::move(links);
    report.emulation = netns_emulation();
    report.bound = shaped_bound(sc, report);
    add_phase_utilisation(push_pull_phase(sc, parts, report.balancing), series, report.links);
    const double job_start_s = std::chrono::duration<double>(spawn_start.time_since_epoch()).count();
    add_utilisation_over_time(series, job_start_s, job_start_s + job_s, report.links);
  } else {
    report.links = loopback_links(sc, parts);
  }
  return report;
}

}  // namespace pstwin::realnet
