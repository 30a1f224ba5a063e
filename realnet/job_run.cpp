#include "realnet/job_run.hpp"
#include "realnet/job_auth.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
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

#include "core/digest.hpp"
#include "ps/workload.hpp"
#include "realnet/link_sampler.hpp"
#include "realnet/netns_cluster.hpp"
#include "realnet/shm_staging.hpp"
#include "report/run_recorder.hpp"

extern char** environ;

namespace pstwin::realnet {
namespace {

using Clock = std::chrono::steady_clock;

// How long nodes told to stop (SIGTERM) get to write their reports before they are killed: a node
// notices within 50 ms, then joins its threads (ZeroMQ lingers up to 1 s) and, in an mlp run, worker 0
// evaluates its model.
constexpr auto kStopGrace = std::chrono::seconds(10);

volatile sig_atomic_t g_signal = 0;
extern "C" void on_signal(int sig) {
  g_signal = sig;
}

// A free TCP port on 127.0.0.1: bind port 0, read what the kernel chose, close.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) throw std::runtime_error(std::string("cannot pick a free port: ") + std::strerror(error));
  return ntohs(addr.sin_port);
}

// "300 s", "0.5 s": a limit as the user wrote it, without std::to_string's six decimals.
std::string format_seconds(double seconds) {
  std::ostringstream out;
  out << seconds << " s";
  return out.str();
}

std::string node_name(const NodePart& part) {
  std::string name(role_name(part.role));
  if (part.id == kNoNode) return name + " (never joined)";
  return name + " " + std::to_string(part.rank) + " (node " + std::to_string(part.id) + ")";
}

// One spawned node (`pstwin node`, or the command of `pstwin run -- COMMAND`): SIGKILLed and reaped
// when it goes out of scope still running. The child also dies with the launcher (PR_SET_PDEATHSIG),
// should the launcher itself be SIGKILLed. `netns_fd` >= 0: the child enters that network namespace
// before it runs.
class Child {
 public:
  Child(std::string name, std::vector<std::string> argv_text, const std::vector<std::string>& env,
        const std::string& log_path, int netns_fd = -1)
      : name_(std::move(name)) {
    std::vector<std::string> env_text = env;
    std::vector<char*> argv;
    for (auto& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      // Only async-signal-safe calls from here to execve.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
      }
      if (netns_fd >= 0 && ::setns(netns_fd, CLONE_NEWNET) != 0) ::_exit(126);
      // A command is looked up on PATH as a shell would (execvpe); `pstwin node` is a path.
      ::execvpe(argv[0], argv.data(), envp.data());
      constexpr std::string_view kCannot = "pstwin run: cannot execute (not found, or not executable): ";
      [[maybe_unused]] auto written = ::write(STDERR_FILENO, kCannot.data(), kCannot.size());
      written = ::write(STDERR_FILENO, argv[0], std::strlen(argv[0]));
      written = ::write(STDERR_FILENO, "\n", 1);
      ::_exit(127);
    }
  }
  ~Child() { kill(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  std::optional<int> exit_code() const { return exit_code_; }

  // True once the child has ended (and been reaped).
  bool poll() {
    if (exit_code_) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return true;
    }
    return false;
  }
  // Asks a running child to stop: `pstwin node` then ends as a failed node does and writes its report.
  void terminate() {
    if (!poll() && pid_ > 0) ::kill(pid_, SIGTERM);
  }
  void kill() {
    if (exit_code_ || pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    exit_code_ = 128 + SIGKILL;
    killed_ = true;
  }
  bool killed() const { return killed_; }

 private:
  std::string name_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  bool killed_ = false;
};

std::optional<NodePart> read_part(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    return part_from_json(nlohmann::json::parse(in));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Restores the previous SIGINT/SIGTERM dispositions when the launch ends.
class SignalGuard {
 public:
  SignalGuard() {
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    g_signal = 0;
    ::sigaction(SIGINT, &action, &old_int_);
    ::sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalGuard() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

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

nlohmann::ordered_json part_to_json(const NodePart& p) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["role"] = std::string(role_name(p.role));
  j["rank"] = p.rank;
  j["id"] = p.id;
  j["address"] = p.address;
  j["completed"] = p.completed;
  j["failure"] = p.failure;
  if (p.crashed) j["crashed"] = true;
  if (p.faults) j["faults"] = faults_json(*p.faults);
  j["checked"] = p.checked;
  j["violation_count"] = p.violation_count;
  j["violations"] = ordered_json::array();
  for (const auto& v : p.violations)
    j["violations"].push_back({{"invariant", v.invariant}, {"detail", v.detail}});
  j["by_invariant"] = tallies_json(p.tallies);
  j["iterations"] = ordered_json::array();
  for (const auto& it : p.iterations)
    j["iterations"].push_back({{"index", it.index}, {"start_s", it.start_s}, {"end_s", it.end_s}});
  j["digests"] = ordered_json::object();
  for (const auto& [key, hex] : p.digests) j["digests"][std::to_string(key)] = hex;
  j["nodes"] = ordered_json::array();
  for (const auto& n : p.nodes) j["nodes"].push_back(node_info_json(n));
  j["bytes_sent"] = p.bytes_sent;
  j["bytes_received"] = p.bytes_received;
  j["messages"] = p.messages;
  j["epoch_s"] = p.epoch_s;
  j["trace"] = ordered_json::array();
  // A span: [thread, category, name, start, end], and [key, iteration, bytes] after it for a message
  // or a tagged step, then [worker, buffer] for a tagged step.
  for (const auto& s : p.trace) {
    ordered_json span = {s.thread, s.category, s.name, s.start_s, s.end_s};
    if (s.message) span.insert(span.end(), {s.message->key, s.message->iteration, s.message->bytes});
    if (s.message && (s.message->worker >= 0 || !s.message->buffer.empty()))
      span.insert(span.end(), {s.message->worker, s.message->buffer});
    j["trace"].push_back(std::move(span));
  }
  j["trace_dropped"] = p.trace_dropped;
  if (!p.refused.empty()) j["refused"] = p.refused;
  if (p.accuracy) j["accuracy"] = accuracy_json(*p.accuracy);
  if (p.balancing) j["balancing"] = balancing_json(*p.balancing);
  if (p.selection) j["selection"] = selection_json(*p.selection);
  if (p.validation) j["validation"] = validation_json(*p.validation);
  if (p.staleness) j["staleness"] = staleness_json(*p.staleness);
  return j;
}

NodePart part_from_json(const nlohmann::json& j) {
  NodePart p;
  const auto role = role_from_name(j.at("role").get<std::string>());
  if (!role) throw std::runtime_error("role: unknown role " + j.at("role").dump());
  p.role = *role;
  p.rank = j.at("rank");
  p.id = j.at("id");
  p.address = j.at("address").get<std::string>();
  p.completed = j.at("completed");
  p.failure = j.at("failure").get<std::string>();
  p.crashed = j.value("crashed", false);
  if (j.contains("faults")) p.faults = faults_from_json(nlohmann::ordered_json(j.at("faults")));
  p.checked = j.at("checked");
  p.violation_count = j.at("violation_count");
  for (const auto& v : j.at("violations")) p.violations.push_back({v.at("invariant"), v.at("detail")});
  add_tallies_from_json(j.at("by_invariant"), p.tallies);
  for (const auto& it : j.at("iterations"))
    p.iterations.push_back({it.at("index"), it.at("start_s"), it.at("end_s")});
  for (const auto& [key, hex] : j.at("digests").items()) p.digests[std::stoull(key)] = hex.get<std::string>();
  for (const auto& n : j.at("nodes")) p.nodes.push_back(node_info_from_json(n));
  p.bytes_sent = j.value("bytes_sent", std::uint64_t{0});
  p.bytes_received = j.value("bytes_received", std::uint64_t{0});
  p.messages = j.value("messages", std::uint64_t{0});
  p.epoch_s = j.value("epoch_s", 0.0);
  if (j.contains("trace"))
    for (const auto& s : j.at("trace")) {
      p.trace.push_back({"", 0, s.at(0).get<std::string>(), s.at(1).get<std::string>(),
                         s.at(2).get<std::string>(), s.at(3).get<double>(), s.at(4).get<double>(),
                         std::nullopt});
      if (s.size() >= 8)
        p.trace.back().message = TraceMessage{s.at(5).get<std::uint64_t>(), s.at(6).get<std::uint32_t>(),
                                              s.at(7).get<std::uint64_t>()};
      if (s.size() >= 10) {
        p.trace.back().message->worker = s.at(8).get<int>();
        p.trace.back().message->buffer = s.at(9).get<std::string>();
      }
    }
  p.trace_dropped = j.value("trace_dropped", std::uint64_t{0});
  if (j.contains("refused")) p.refused = j.at("refused").get<std::map<std::string, std::uint64_t>>();
  if (j.contains("accuracy")) p.accuracy = accuracy_from_json(j.at("accuracy"));
  if (j.contains("balancing")) p.balancing = balancing_from_json(j.at("balancing"));
  if (j.contains("selection")) p.selection = selection_from_json(j.at("selection"));
  if (j.contains("validation")) p.validation = validation_from_json(j.at("validation"));
  if (j.contains("staleness")) p.staleness = staleness_from_json(j.at("staleness"));
  return p;
}

RunReport merge_parts(const Scenario& sc, const std::vector<NodePart>& parts, const std::string& failure) {
  RunReport report;
  report.scenario = sc.name;
  report.backend = "real";
  report.seed = sc.seed;
  report.lb_chosen = sc.lb_chosen;
  std::map<std::uint32_t, double> slowest;
  std::map<std::uint64_t, std::string> digests;
  std::ostringstream failures;
  if (!failure.empty()) failures << failure;
  for (const auto& part : parts) {
    const std::string name = node_name(part);
    if (part.faults) {
      if (!report.faults) report.faults.emplace();
      report.faults->resend_enabled = part.faults->resend_enabled;
      add_fault_counts(*report.faults, *part.faults);
      // The scheduler declared them; every node heard it.
      if (report.faults->lost_workers.size() < part.faults->lost_workers.size())
        report.faults->lost_workers = part.faults->lost_workers;
    }
    // A node crashed by faults.crashes is the fault, not the job's failure: the scheduler declares it
    // dead, and the job then fails naming it or goes on without it (ps.on_worker_loss).
    if (part.crashed) continue;
    if (!part.completed && failure.empty())
      failures << (failures.tellp() > 0 ? "; " : "") << name << ": " << part.failure;
    report.invariants_checked += part.checked;
    report.violation_count += part.violation_count;
    for (const auto& v : part.violations) report.violations.push_back({v.invariant, name + ": " + v.detail});
    add_tallies(part.tallies, report.invariant_tallies);
    for (const auto& it : part.iterations) {
      auto& s = slowest[it.index];
      s = std::max(s, it.end_s - it.start_s);
    }
    for (const auto& [key, hex] : part.digests) digests[key] = hex;
    if (part.role == Role::kScheduler) report.nodes = part.nodes;
    if (part.accuracy) report.accuracy = part.accuracy;     // worker 0's
    if (part.balancing) report.balancing = part.balancing;  // the scheduler's
    if (part.selection) {                                   // each server judged its own keys
      if (!report.selection) report.selection.emplace();
      add_selection(*report.selection, *part.selection);
    }
    if (part.validation) {  // two validators judge disjoint sets of workers
      if (!report.validation) report.validation.emplace();
      add_validation(*report.validation, *part.validation);
    }
    if (part.staleness) {  // each server (or aggregator) counted its own keys' pushes
      if (!report.staleness) report.staleness.emplace();
      add_staleness(*report.staleness, *part.staleness);
    }
    if (!part.refused.empty()) report.refused[name] = part.refused;
    report.messages += part.messages;
    report.message_bytes += part.bytes_sent;
    report.trace_dropped += part.trace_dropped;
  }
  // One trace: a process per node in part order, times shifted from each node's clock to the earliest.
  double base = 0;
  for (const auto& part : parts) base = base == 0 ? part.epoch_s : std::min(base, part.epoch_s);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto& part = parts[i];
    const std::string label =
        std::string(role_name(part.role)) +
        (part.role != Role::kScheduler && part.rank >= 0 ? " " + std::to_string(part.rank) : "");
    const double shift = part.epoch_s - base;
    for (const auto& s : part.trace)
      report.trace.push_back({label, static_cast<int>(i), s.thread, s.category, s.name, s.start_s + shift,
                              s.end_s + shift, s.message});
  }
  for (const auto& [index, seconds] : slowest)
    report.iterations.push_back({static_cast<int>(index), seconds});
  if (report.balancing) {  // as RunRecorder::fill: the iterations that ran a balanced decision
    auto& b = *report.balancing;
    double sum = 0;
    b.balanced_iterations = 0;
    for (const auto& d : b.decisions)
      if (const auto it = slowest.find(d.iteration); !d.probe && it != slowest.end()) {
        sum += it->second;
        ++b.balanced_iterations;
      }
    b.balanced_mean_s = b.balanced_iterations > 0 ? sum / b.balanced_iterations : 0;
  }
  // Exactly RunRecorder::fill.
  Digest digest;
  for (const auto& [key, hex] : digests) {
    digest.update_u64(key);
    digest.update(std::as_bytes(std::span(hex.data(), hex.size())));
  }
  report.model_digest = digests.empty() ? "" : digest.hex();
  report.failure = failures.str();
  report.completed = report.failure.empty();
  if (!report.completed) {
    report.violations.push_back({"run", report.failure});
    ++report.violation_count;
    ++report.invariant_tallies["run"].violated;
  }
  report.replay = replay_command(sc, std::nullopt, "run");
  return report;
}

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
  std::vector<std::string> base_env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    if (entry.starts_with("DMLC_") || entry.starts_with("BYTEPS_") || entry.starts_with("PS_") ||
        entry.starts_with("PSTWIN_JOB_TOKEN="))
      continue;
    base_env.push_back(entry);
  }
  // A fresh secret per job: its nodes prove it on every connection, so nothing else joins the job.
  base_env.push_back("PSTWIN_JOB_TOKEN=" + JobKey::random_token());
  // The port also names this job's shared-memory staging objects, so it is picked on this host even
  // when the nodes run in namespaces of their own.
  const int port = free_port();
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
  const SignalGuard signals;
  std::vector<std::unique_ptr<Child>> children;  // destroyed (killed and reaped) on any exit path
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
    std::vector<std::string> argv{binary,       "node",
                                  "--scenario", options.scenario_path,
                                  "--report",   (dir / (spec.name + ".json")).string()};
    for (const auto& set : options.sets) argv.insert(argv.end(), {"--set", set});
    if (options.seed) argv.insert(argv.end(), {"--set", "seed=" + std::to_string(*options.seed)});
    if (!options.command.empty()) argv = options.command;
    children.push_back(std::make_unique<Child>(spec.name, std::move(argv), env,
                                               (dir / (spec.name + ".log")).string(),
                                               cluster ? cluster->netns_fd(spec.host) : -1));
    log("started " + spec.name + " (pid " + std::to_string(children.back()->pid()) + ")");
  }

  // run.time_limit, wall clock, as every node's own limit (sim.max_time is simulated time).
  const double timeout_s = sc.run.time_limit_s;
  log("time limit " + format_seconds(timeout_s) + " (run.time_limit)");
  const auto deadline =
      wall_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  std::string failure;
  auto kill_all = [&] {
    for (auto& child : children) child->kill();
  };
  // SIGINT/SIGTERM to the launcher: every node killed, everything made removed, exit 128 + signal.
  auto exit_on_signal = [&] {
    const int sig = g_signal;
    kill_all();
    ShmStaging::unlink_all(staging_sweep.prefix);  // std::exit skips the sweep's destructor
    sampler.reset();
    cluster.reset();  // std::exit runs no destructors of this frame
    log(std::string("interrupted by signal ") + std::to_string(sig) + ": killed every node");
    std::exit(128 + sig);
  };
  // The job ends early: the nodes still running are told to stop, so each writes what it completed
  // (iterations, checks) and results.json has it; one that does not stop in time is killed.
  auto stop_all = [&] {
    for (auto& child : children) child->terminate();
    const auto until = Clock::now() + kStopGrace;
    while (g_signal == 0 && Clock::now() < until &&
           !std::ranges::all_of(children, [](const auto& child) { return child->poll(); }))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    kill_all();
  };
  for (;;) {
    if (g_signal != 0) exit_on_signal();
    if (kernel_cuts) {
      try {
        apply_kernel_cuts();
      } catch (const NetnsError& e) {
        failure = e.what();
        log(failure + ": stopping every node");
        stop_all();
        break;
      }
    }
    // Past the limit a node's own (a little later: it started later) is no failure of its own.
    const bool late = Clock::now() >= deadline;
    bool all_done = true;
    for (auto& child : children) {
      if (!child->poll()) {
        all_done = false;
        continue;
      }
      const int code = *child->exit_code();
      if (code == 0 || child->killed() || !failure.empty() || late) continue;
      // Exit status 1 with a completed report is a node that saw violations: the job goes on.
      const auto part = read_part((dir / (child->name() + ".json")).string());
      if (code == 1 && part && part->completed) continue;
      // Crashed by faults.crashes: the scheduler declares it dead and decides what follows.
      if (part && part->crashed) continue;
      // Its own words name the node at fault: the scheduler that exits first on a heartbeat timeout
      // names the silent node, a node the scheduler ended names the one that failed.
      failure = child->name() + " failed with exit status " + std::to_string(code) +
                (part && !part->failure.empty() ? ": " + part->failure : "") + " (see " +
                (dir / (child->name() + ".log")).string() + ")";
      log(failure + ": stopping every node");
    }
    if (!failure.empty()) {
      stop_all();
      break;
    }
    if (all_done) break;
    if (late) {
      failure = "run.time_limit of " + format_seconds(timeout_s) +
                " (wall clock) reached before every node ended; the nodes were stopped";
      log(failure);
      stop_all();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (g_signal != 0) exit_on_signal();  // while the nodes were stopping: no longer waited for
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
    auto part = read_part((dir / (spec.name + ".json")).string());
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
