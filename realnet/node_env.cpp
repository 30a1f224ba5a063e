#include "realnet/node_env.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <limits>
#include <string_view>

extern char** environ;  // POSIX: the process environment

#include "core/edit_distance.hpp"
#include "realnet/job_auth.hpp"

namespace pstwin::realnet {
namespace {

using Env = std::map<std::string, std::string>;

[[noreturn]] void bad(const std::string& name, const std::string& value, const std::string& expected) {
  throw NodeEnvError(name + "=\"" + value + "\": expected " + expected);
}

const std::string* find(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

const std::string& required(const Env& env, const std::string& name, const std::string& example) {
  const std::string* value = find(env, name);
  if (value == nullptr || value->empty())
    throw NodeEnvError(name + " is not set: it is required; e.g. export " + name + "=" + example);
  return *value;
}

// A whole decimal integer in [low, high]; "08", "+3", " 3", "3x" and "" are refused.
std::int64_t integer(const std::string& name, const std::string& value, std::int64_t low, std::int64_t high,
                     const std::string& expected) {
  std::int64_t out = 0;
  const auto* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (value.empty() || ec != std::errc() || ptr != end || out < low || out > high) bad(name, value, expected);
  return out;
}

bool flag(const std::string& name, const std::string& value) {
  if (value == "0") return false;
  if (value == "1") return true;
  bad(name, value, "0 or 1");
}

}  // namespace

std::string NodeEnv::bind_address() const {
  if (role == Role::kScheduler) return scheduler_address();
  return node_host + ":" + (node_port > 0 ? std::to_string(node_port) : "*");
}

std::vector<std::pair<std::string, std::string>> NodeEnv::scenario_overrides() const {
  std::vector<std::pair<std::string, std::string>> out{{"roles.workers", std::to_string(num_workers)},
                                                       {"roles.servers", std::to_string(num_servers)}};
  if (partition_bytes) out.emplace_back("ps.partition_bytes", std::to_string(*partition_bytes));
  if (enable_async) out.emplace_back("ps.mode", *enable_async ? "async" : "sync");
  if (num_validators > 0) out.emplace_back("roles.validators", std::to_string(num_validators));
  if (server_engine_threads)
    out.emplace_back("ps.server_engine_threads", std::to_string(*server_engine_threads));
  return out;
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> environment;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const auto eq = entry.find('=');
    if (eq != std::string_view::npos) environment.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return environment;
}

std::map<std::string, std::string> node_variables(const std::map<std::string, std::string>& environment) {
  std::map<std::string, std::string> vars;
  for (const auto& name : node_env_variables())
    if (const auto it = environment.find(name); it != environment.end()) vars.emplace(name, it->second);
  return vars;
}

const std::vector<std::string>& node_env_variables() {
  static const std::vector<std::string> names{
      "DMLC_ROLE",
      // Launchers: the role when DMLC_ROLE is unset.
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_PROCID",
      "SLURM_NTASKS", "SLURM_NNODES", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_WORKER",
      "DMLC_NUM_SERVER", "DMLC_WORKER_ID", "DMLC_NUM_VALIDATOR", "DMLC_WORKER_TYPE", "DMLC_VALIDATOR_ID",
      "DMLC_NODE_HOST", "DMLC_NODE_PORT", "DMLC_INTERFACE", "BYTEPS_PARTITION_BYTES", "BYTEPS_ENABLE_ASYNC",
      "BYTEPS_SERVER_ENGINE_THREAD", "BYTEPS_FORCE_DISTRIBUTED", "PS_VERBOSE", "BYTEPS_LOG_LEVEL",
      "DMLC_PS_VAN_TYPE", "PSTWIN_NIC_RATE", "PSTWIN_PACING", "PSTWIN_HOST", "PSTWIN_JOB_START",
      "PSTWIN_PARTITIONS", "PSTWIN_JOB_TOKEN", "PSTWIN_ENCRYPT", "DMLC_ENABLE_RDMA", "DMLC_ENABLE_UCX",
      // Read by pstwin.torch's DistributedOptimizer (docs/API.md), not by the node.
      "PSTWIN_WORKLOAD_RECORD"};
  return names;
}

namespace {

struct Unsupported {
  std::string_view name;
  std::string_view instead;
};

// docs/ENVIRONMENT.md, "Not supported yet".
constexpr std::array kUnsupported{
    Unsupported{"DMLC_NUM_ALL_WORKER", ""},
    Unsupported{"DMLC_GROUP_SIZE", ""},
    Unsupported{"BYTEPS_KEY_HASH_FN", "use --set ps.key_hash=djb2|sdbm|naive"},
    Unsupported{"BYTEPS_SCHEDULING_CREDIT", "use --set ps.scheduling_credit=N"},
    Unsupported{"BYTEPS_LOCAL_RANK",
                "one process per worker; ps.local_reduce groups them by roles.worker_hosts"},
    Unsupported{"BYTEPS_LOCAL_SIZE",
                "one process per worker; ps.local_reduce groups them by roles.worker_hosts"},
    Unsupported{"BYTEPS_PCIE_SWITCH_SIZE", "see the scenario's workload.device and ps.local_reduce"},
    Unsupported{"BYTEPS_NCCL_NUM_RINGS", "see the scenario's workload.device and ps.local_reduce"},
    Unsupported{"BYTEPS_NCCL_GROUP_SIZE", "see the scenario's workload.device and ps.local_reduce"},
    Unsupported{"BYTEPS_SERVER_ENABLE_SCHEDULE", ""},
    Unsupported{"BYTEPS_SERVER_ENABLE_PROFILE", ""},
    Unsupported{"BYTEPS_VISIBLE_CPU_CORES", ""},
    Unsupported{"BYTEPS_ENABLE_GDB", ""},
    Unsupported{"BYTEPS_DEBUG_SAMPLE_TENSOR", ""},
    Unsupported{"PS_RESEND", "see the scenario's ps.resend"},
    Unsupported{"PS_RESEND_TIMEOUT", "see the scenario's ps.resend_timeout"},
    Unsupported{"PS_HEARTBEAT_TIMEOUT", "see the scenario's ps.heartbeat_timeout"},
    Unsupported{"PS_HEARTBEAT_INTERVAL", "see the scenario's ps.heartbeat_interval"},
    Unsupported{"BYTEPS_TRACE_ON", "pstwin node writes no trace"},
    Unsupported{"BYTEPS_TRACE_DIR", "pstwin node writes no trace"},
};

constexpr std::array<std::string_view, 4> kFamilies{"DMLC_", "BYTEPS_", "PS_", "PSTWIN_"};

std::string upper(std::string_view text) {
  std::string out(text);
  std::ranges::transform(out, out.begin(),
                         [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return out;
}

}  // namespace

std::vector<std::string> check_env_names(const Env& environment) {
  const auto& known = node_env_variables();
  std::vector<std::string_view> candidates(known.begin(), known.end());
  for (const auto& entry : kUnsupported) candidates.push_back(entry.name);
  std::vector<std::string> warnings;
  for (const auto& [name, value] : environment) {
    const std::string family_name = upper(name);
    if (std::ranges::none_of(kFamilies, [&](std::string_view f) { return family_name.starts_with(f); }))
      continue;
    if (std::ranges::find(known, name) != known.end()) continue;
    if (const auto entry = std::ranges::find(kUnsupported, std::string_view(name), &Unsupported::name);
        entry != kUnsupported.end()) {
      const std::string what = name + "=\"" + value + "\" is not supported yet";
      warnings.push_back(what + (entry->instead.empty() ? "" : " (" + std::string(entry->instead) + ")") +
                         "; ignored");
      continue;
    }
    // A near miss: what was meant is silently unset otherwise (DMLC_PS_VAN_TYP=epoll runs ZeroMQ).
    std::string_view best;
    std::size_t best_distance = 3;
    for (const auto candidate : candidates) {
      // Lengths this far apart are no near miss: a name as long as the environment allows costs
      // nothing then (the distance's table is the product of the lengths).
      const std::size_t apart =
          name.size() > candidate.size() ? name.size() - candidate.size() : candidate.size() - name.size();
      if (apart >= best_distance) continue;
      const std::size_t distance =
          upper(candidate) == family_name ? 0 : edit_distance(name, candidate, best_distance - 1);
      if (distance < best_distance) {
        best = candidate;
        best_distance = distance;
      }
    }
    if (!best.empty())
      throw NodeEnvError(name + "=\"" + value + "\": not a variable pstwin reads; did you mean " +
                         std::string(best) + "? (docs/ENVIRONMENT.md lists them)");
    warnings.push_back(name + " is not a variable pstwin reads (docs/ENVIRONMENT.md); ignored");
  }
  return warnings;
}

namespace {

// A job started by a launcher (mpirun, srun) without DMLC_ROLE: the launcher's rank and size decide
// the role, docs/ENVIRONMENT.md "Launchers". Rank 0 is the scheduler, ranks 1..S the servers
// (S = DMLC_NUM_SERVER, default 1), the rest the workers (DMLC_WORKER_ID = rank - 1 - S); on one host the
// scheduler's address defaults to 127.0.0.1. `env` is returned with the DMLC_* variables so decided.
Env with_launcher_roles(const Env& env) {
  if (find(env, "DMLC_ROLE") != nullptr) return env;
  struct Launcher {
    const char* name;
    const char* rank;
    const char* size;
    const char* hosts;  // how many hosts the job spans, or per-host size for Open MPI (see below)
  };
  static constexpr Launcher kLaunchers[] = {
      {"Open MPI (mpirun)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"Slurm (srun)", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NNODES"},
  };
  const auto launcher = std::ranges::find_if(kLaunchers, [&](const Launcher& l) {
    return find(env, l.rank) != nullptr && find(env, l.size) != nullptr;
  });
  if (launcher == std::end(kLaunchers)) return env;
  constexpr std::int64_t kMaxRanks = 1 << 19;
  const auto rank = integer(launcher->rank, *find(env, launcher->rank), 0, kMaxRanks, "a rank >= 0");
  const auto size = integer(launcher->size, *find(env, launcher->size), 1, kMaxRanks, "a job size >= 1");
  const std::string* servers_text = find(env, "DMLC_NUM_SERVER");
  const auto servers =
      servers_text ? integer("DMLC_NUM_SERVER", *servers_text, 1, kMaxRanks, "a number of servers >= 1")
                   : std::int64_t{1};
  if (size < servers + 2)
    throw NodeEnvError(std::string(launcher->name) + " started " + std::to_string(size) + " processes (" +
                       launcher->size + "), too few for a scheduler, " + std::to_string(servers) +
                       " server(s) (DMLC_NUM_SERVER) and a worker: start at least " +
                       std::to_string(servers + 2));
  Env out = env;
  const std::string workers = std::to_string(size - 1 - servers);
  if (const std::string* set = find(env, "DMLC_NUM_WORKER"); set != nullptr) {
    const auto wanted = integer("DMLC_NUM_WORKER", *set, 1, kMaxRanks, "a number of workers >= 1");
    if (wanted != size - 1 - servers)
      throw NodeEnvError("DMLC_NUM_WORKER=\"" + *set + "\" but " + launcher->name + " started " +
                         std::to_string(size) + " processes: 1 scheduler, " + std::to_string(servers) +
                         " server(s) and " + workers + " worker(s); unset DMLC_NUM_WORKER or start " +
                         std::to_string(1 + servers + wanted) + " processes");
  }
  out["DMLC_NUM_SERVER"] = std::to_string(servers);
  out["DMLC_NUM_WORKER"] = workers;
  out["DMLC_ROLE"] = rank == 0 ? "scheduler" : rank <= servers ? "server" : "worker";
  if (rank > servers) out["DMLC_WORKER_ID"] = std::to_string(rank - 1 - servers);
  // Open MPI: every rank on this host (local size = size); Slurm: one node.
  const std::string* hosts = find(env, launcher->hosts);
  const bool one_host = hosts != nullptr &&
                        (launcher == std::begin(kLaunchers) ? *hosts == std::to_string(size) : *hosts == "1");
  if (one_host && find(env, "DMLC_PS_ROOT_URI") == nullptr) out["DMLC_PS_ROOT_URI"] = "127.0.0.1";
  return out;
}

}  // namespace

NodeEnv parse_node_env(const Env& launched, NodeEnvRules rules) {
  constexpr std::int64_t kMaxNodes = 1 << 19;  // worker ids stay below the validator id range
  const Env env = with_launcher_roles(launched);
  NodeEnv out;
  const std::string& role = required(env, "DMLC_ROLE", "worker");
  if (role == "scheduler")
    out.role = Role::kScheduler;
  else if (role == "server")
    out.role = Role::kServer;
  else if (role == "worker")
    out.role = Role::kWorker;
  else
    bad("DMLC_ROLE", role, "scheduler, server or worker");

  out.root_uri = required(env, "DMLC_PS_ROOT_URI", "127.0.0.1");
  if (out.root_uri.find_first_of(" :/*") != std::string::npos)
    bad("DMLC_PS_ROOT_URI", out.root_uri,
        "the scheduler's IP address or host name, e.g. 127.0.0.1 (no port)");
  out.root_port = static_cast<int>(integer("DMLC_PS_ROOT_PORT", required(env, "DMLC_PS_ROOT_PORT", "1234"), 1,
                                           65535, "a port 1-65535, e.g. 1234"));
  out.num_workers = static_cast<int>(integer("DMLC_NUM_WORKER", required(env, "DMLC_NUM_WORKER", "2"), 1,
                                             kMaxNodes, "a number of workers >= 1"));
  out.num_servers = static_cast<int>(integer("DMLC_NUM_SERVER", required(env, "DMLC_NUM_SERVER", "1"), 1,
                                             kMaxNodes, "a number of servers >= 1"));
  // ZenoPS: a validator is launched as DMLC_ROLE=worker with DMLC_WORKER_TYPE=validator.
  if (const auto* v = find(env, "DMLC_NUM_VALIDATOR"); v != nullptr && !v->empty())
    out.num_validators =
        static_cast<int>(integer("DMLC_NUM_VALIDATOR", *v, 0, out.num_workers,
                                 "a number of validators 0.." + std::to_string(out.num_workers) +
                                     " (at most DMLC_NUM_WORKER), e.g. 1"));
  if (const auto* type = find(env, "DMLC_WORKER_TYPE"); type != nullptr && !type->empty()) {
    if (*type == "validator") {
      if (out.role != Role::kWorker)
        bad("DMLC_WORKER_TYPE", *type, "unset (or \"worker\") unless DMLC_ROLE=worker");
      if (out.num_validators == 0)
        bad("DMLC_WORKER_TYPE", *type, "DMLC_NUM_VALIDATOR >= 1 too: the job has no validators");
      out.role = Role::kValidator;
      const std::string& id = required(env, "DMLC_VALIDATOR_ID", "0");
      out.validator_id =
          static_cast<int>(integer("DMLC_VALIDATOR_ID", id, 0, out.num_validators - 1,
                                   "a validator rank 0.." + std::to_string(out.num_validators - 1) +
                                       " (DMLC_NUM_VALIDATOR=" + std::to_string(out.num_validators) +
                                       "), distinct for each validator"));
    } else if (*type != "worker") {
      bad("DMLC_WORKER_TYPE", *type, "\"validator\" or \"worker\"");
    }
  }
  const auto* worker_id = find(env, "DMLC_WORKER_ID");
  if (out.role == Role::kWorker &&
      (rules.worker_id_required || (worker_id != nullptr && !worker_id->empty()))) {
    const std::string& id = required(env, "DMLC_WORKER_ID", "0");
    out.worker_id = static_cast<int>(integer("DMLC_WORKER_ID", id, 0, out.num_workers - 1,
                                             "a worker rank 0.." + std::to_string(out.num_workers - 1) +
                                                 " (DMLC_NUM_WORKER=" + std::to_string(out.num_workers) +
                                                 "), distinct for each worker"));
  }
  if (const auto* host = find(env, "DMLC_NODE_HOST"); host != nullptr && !host->empty()) {
    if (host->find_first_of(" :/*") != std::string::npos || *host == "0.0.0.0")
      bad("DMLC_NODE_HOST", *host,
          "this machine's IP address that the other nodes can reach, e.g. 127.0.0.1 (no port, not 0.0.0.0: "
          "it is advertised to the other nodes)");
    out.node_host = *host;
    out.node_host_given = true;
  }
  if (const auto* port = find(env, "DMLC_NODE_PORT"); port != nullptr && !port->empty())
    out.node_port =
        static_cast<int>(integer("DMLC_NODE_PORT", *port, 1, 65535,
                                 "a port 1-65535 for this server or worker to listen on, e.g. 9100 "
                                 "(unset: a free port)"));
  if (const auto* name = find(env, "DMLC_INTERFACE"); name != nullptr && !name->empty()) {
    if (name->size() > 15 || name->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                     "0123456789.-_:@") != std::string::npos)
      bad("DMLC_INTERFACE", *name, "a network interface's name, e.g. eth0 (ip -brief address lists them)");
    out.interface = *name;
  }
  if (const auto* v = find(env, "BYTEPS_PARTITION_BYTES"))
    out.partition_bytes = static_cast<std::uint64_t>(integer("BYTEPS_PARTITION_BYTES", *v, 4,
                                                             std::numeric_limits<std::int64_t>::max(),
                                                             "a partition size in bytes >= 4, e.g. 4096000"));
  if (const auto* v = find(env, "BYTEPS_ENABLE_ASYNC")) out.enable_async = flag("BYTEPS_ENABLE_ASYNC", *v);
  if (const auto* v = find(env, "BYTEPS_SERVER_ENGINE_THREAD"))
    out.server_engine_threads = static_cast<int>(
        integer("BYTEPS_SERVER_ENGINE_THREAD", *v, 1, 1024, "a number of server engine threads 1-1024"));
  if (const auto* v = find(env, "BYTEPS_FORCE_DISTRIBUTED"))
    out.force_distributed = flag("BYTEPS_FORCE_DISTRIBUTED", *v);
  if (const auto* v = find(env, "PS_VERBOSE"))
    out.verbose = static_cast<int>(integer("PS_VERBOSE", *v, 0, 2, "0, 1 or 2"));
  if (const auto* v = find(env, "BYTEPS_LOG_LEVEL")) {
    std::string level = *v;
    std::ranges::transform(level, level.begin(),
                           [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    static const std::vector<std::string> kLevels{"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"};
    if (std::ranges::find(kLevels, level) == kLevels.end())
      bad("BYTEPS_LOG_LEVEL", *v, "TRACE, DEBUG, INFO, WARNING, ERROR or FATAL");
    out.log_level = level;
    // BytePS users raise logging with BYTEPS_LOG_LEVEL, ps-lite users with PS_VERBOSE: honour either.
    const int implied = level == "TRACE" ? 2 : (level == "DEBUG" || level == "INFO") ? 1 : 0;
    out.verbose = std::max(out.verbose, implied);
  }
  bool van_named = false;  // else default_van(), once PSTWIN_ENCRYPT is known
  if (const auto* v = find(env, "DMLC_PS_VAN_TYPE"); v != nullptr && !v->empty()) {
    const auto van = parse_van(*v);
    if (!van) bad("DMLC_PS_VAN_TYPE", *v, std::string(kVanChoices) + " (the same for every node of the job)");
    out.van = *van;
    van_named = true;
  }
  // BytePS users ask for RDMA with DMLC_ENABLE_RDMA=1 (ps-lite's UCX van with DMLC_ENABLE_UCX=1): both
  // mean the UCX van, which uses RDMA where the fabric has it.
  for (const std::string name : {"DMLC_ENABLE_RDMA", "DMLC_ENABLE_UCX"}) {
    const auto* v = find(env, name);
    if (v == nullptr || v->empty() || !flag(name, *v)) continue;
    const auto* type = find(env, "DMLC_PS_VAN_TYPE");
    if (type != nullptr && !type->empty() && out.van != Van::kUcx)
      bad(name, *v,
          "0 with DMLC_PS_VAN_TYPE=" + *type +
              " (RDMA runs on the ucx van: unset DMLC_PS_VAN_TYPE or set it to ucx)");
    out.van = Van::kUcx;
    van_named = true;
  }
  if (const auto missing = van_unavailable(out.van); !missing.empty())
    throw NodeEnvError("DMLC_PS_VAN_TYPE=ucx (or DMLC_ENABLE_RDMA=1): " + std::string(missing));
  if (const auto* v = find(env, "PSTWIN_NIC_RATE"); v != nullptr && *v == "auto")
    out.nic_rate_auto = true;
  else if (v != nullptr)
    out.nic_rate_Bps = static_cast<double>(
        integer("PSTWIN_NIC_RATE", *v, 1, std::int64_t{1} << 40,
                "this node's NIC rate in bytes per second, e.g. 125000000 for 1 Gb/s, or auto (the speed the "
                "kernel reports for the interface of DMLC_NODE_HOST); unset: no pacing or receive shaping"));
  if (const auto* v = find(env, "PSTWIN_PACING"); v != nullptr && !v->empty()) {
    if (*v != "user" && *v != "kernel")
      bad("PSTWIN_PACING", *v,
          "user (the epoll van holds a paced connection a message at a time; the default) or kernel "
          "(SO_MAX_PACING_RATE)");
    out.kernel_pacing = *v == "kernel";
  }
  if (const auto* v = find(env, "PSTWIN_HOST"); v != nullptr && !v->empty()) {
    // It becomes part of shared-memory object names, which are limited to 255 characters.
    if (v->size() > 64)
      bad("PSTWIN_HOST", *v,
          "a host name of at most 64 characters (nodes with the same PSTWIN_HOST share staging memory), "
          "e.g. h1; unset: this machine's host name");
    out.host = *v;
  }
  if (const auto* v = find(env, "PSTWIN_JOB_START"); v != nullptr && !v->empty()) {
    const auto now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    out.job_start_s = static_cast<double>(
                          integer("PSTWIN_JOB_START", *v, 0, now_ns,
                                  "the job's start on this machine's steady clock in nanoseconds, not later "
                                  "than now (pstwin run sets it; the zero of every [faults] window); unset: "
                                  "this node's start")) *
                      1e-9;
  }
  if (const auto* v = find(env, "PSTWIN_PARTITIONS"); v != nullptr && !v->empty()) {
    if (*v != "van" && *v != "kernel")
      bad("PSTWIN_PARTITIONS", *v,
          "van (this node drops what crosses a faults.partitions window; the default) or kernel (the switch "
          "of a namespace cluster does, for partitions that list hosts; pstwin run --netns "
          "--kernel-partitions)");
    out.kernel_partitions = *v == "kernel";
  }
  if (const auto* v = find(env, "PSTWIN_JOB_TOKEN"); v != nullptr && !v->empty()) {
    // The value is a secret: the message names its length, never the text.
    if (v->size() < kMinTokenBytes || v->size() > 1024)
      throw NodeEnvError("PSTWIN_JOB_TOKEN has " + std::to_string(v->size()) + " characters: expected " +
                         std::to_string(kMinTokenBytes) +
                         " to 1024, the same on every node of the job, e.g. the output of `openssl rand "
                         "-hex 32` (`pstwin run` makes one per job)");
    out.job_token = *v;
  }
  if (const auto* v = find(env, "PSTWIN_ENCRYPT"); v != nullptr && !v->empty()) {
    if (*v != "curve" && *v != "none")
      bad("PSTWIN_ENCRYPT", *v,
          "curve (the ZeroMQ van encrypts every connection with CURVE keys derived from PSTWIN_JOB_TOKEN) "
          "or none (the default), the same on every node of the job");
    out.encrypt = *v == "curve";
  }
  if (!van_named) out.van = default_van(out.encrypt);
  if (out.encrypt && out.job_token.empty())
    throw NodeEnvError(
        "PSTWIN_ENCRYPT=curve needs PSTWIN_JOB_TOKEN, from which the job's CURVE keys are derived: set "
        "PSTWIN_JOB_TOKEN to the job's secret, the same on every node (e.g. the output of `openssl rand "
        "-hex 32`; `pstwin run` makes one per job), or unset PSTWIN_ENCRYPT");
  if (const auto why = encryption_unavailable(out.van); out.encrypt && !why.empty())
    throw NodeEnvError("PSTWIN_ENCRYPT=curve with DMLC_PS_VAN_TYPE=" + std::string(van_name(out.van)) + ": " +
                       why);
  return out;
}

}  // namespace pstwin::realnet
