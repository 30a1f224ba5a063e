// A scenario: everything a run needs, loaded from TOML (scenarios/*.toml), overridable by
// `--set dotted.path=value`, and written back fully resolved (defaults filled in).
// Units in the file: sizes "4MB"/"4MiB"/bytes, bandwidths "10Gbps"/"1.25GBps"/bytes per second,
// durations "5us"/"2ms"/"1s"/seconds. In this struct everything is bytes, bytes/s and seconds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pstwin {

enum class Topology { kStar, kTwoTier };
enum class TrainingMode { kSync, kAsync };
enum class KeyHash { kDjb2, kSdbm, kNaive };
enum class PayloadMode { kReal, kPhantom };
enum class StagingNaming { kPerRank, kLegacyKeyOnly };
enum class WorkloadKind { kSynthetic, kMlp };
enum class ShardingKind { kIid, kDirichlet };
enum class PushPullMode { kSeparate, kFused };
enum class Balancing { kHash, kLb };
enum class DeviceKind { kCpu, kCuda };
enum class LocalReduce { kNone, kShm, kNccl };

struct LinkSpec {
  double bandwidth_Bps = 0;
  double latency_s = 0;
};

struct ClusterConfig {
  Topology topology = Topology::kStar;
  int hosts = 0;                       // 0: one host per node (scheduler, servers, workers)
  double host_bandwidth_Bps = 1.25e9;  // "10Gbps": every host's NIC, full duplex
  double host_latency_s = 5e-6;
  double host_speed_flops = 1e11;  // per core
  int host_cores = 8;
  int racks = 2;  // two-tier only: hosts are spread round-robin over racks
  double rack_uplink_bandwidth_Bps = 5e9;
  double switch_bandwidth_Bps = 0;  // star: the switch's capacity shared by all traffic; 0: non-blocking
  double rack_uplink_latency_s = 2e-6;
  double pcie_bandwidth_Bps = 12e9;            // workload.device = "cuda": each worker's GPU <-> host copies
  double intra_host_bandwidth_Bps = 16e9;      // ps.local_reduce: copies between a host's workers
  std::map<std::string, LinkSpec> host_links;  // per-host override, [cluster.links.h3]
};

struct RolesConfig {
  int servers = 1;
  int workers = 2;
  // Placement: node of rank r goes on list[r % size]. Empty lists mean the default placement:
  // scheduler on h0, then servers, then workers, each on its own host (wrapping if hosts is smaller).
  std::string scheduler_host;
  std::vector<std::string> server_hosts;
  std::vector<std::string> worker_hosts;
  // ZenoPS validators (src/zeno): 0 = none (servers aggregate with zeno.rule themselves).
  int validators = 0;
  std::vector<std::string> validator_hosts;
};

struct PsConfig {
  TrainingMode mode = TrainingMode::kSync;
  std::uint64_t partition_bytes = 4096000;  // BYTEPS_PARTITION_BYTES
  KeyHash key_hash = KeyHash::kDjb2;        // BYTEPS_KEY_HASH_FN
  int server_engine_threads = 4;            // BYTEPS_SERVER_ENGINE_THREAD
  int scheduling_credit = 4;  // BYTEPS_SCHEDULING_CREDIT: partitions in flight per worker, 0 = no limit
  // fused: one request, the reply carries the aggregate; the loader picks separate for a job with
  // validators that leaves the field out
  PushPullMode push_pull = PushPullMode::kFused;
  bool priority_scheduling = true;  // false: every partition priority 0, pushed in the order staged
  double heartbeat_interval_s = 1.0;
  double heartbeat_timeout_s = 10.0;
  double connect_timeout_s = 10.0;  // how long a node waits for the scheduler's node table
  // Acknowledge and resend (docs/FAULTS.md); unset: on when a fault may drop or double messages.
  std::optional<bool> resend;
  double resend_timeout_s = 1.0;  // ps-lite's PS_RESEND_TIMEOUT default
  // What a sync or async job does when the scheduler declares a worker dead: "fail" the job, or
  // "continue" with the survivors (later rounds complete with their pushes).
  std::string on_worker_loss = "fail";
  bool continues_on_worker_loss() const { return on_worker_loss == "continue"; }
  int max_staleness = 0;   // async: refuse a push more than this many key versions behind; 0 = unbounded
  int backup_workers = 0;  // sync: a round completes with the first workers - b pushes; late ones are dropped
  bool require_token = false;  // `pstwin node` refuses to start without PSTWIN_JOB_TOKEN
  // Real runs refuse to start unencrypted: `pstwin node` without PSTWIN_ENCRYPT=curve, `pstwin run` and
  // `pstwin launch` without --encrypt curve.
  bool require_encryption = false;
  // BytePS's hierarchical mode: the workers of one host reduce to its lowest-ranked worker, which alone
  // pushes and pulls for the host (src/ps/host_reduce.hpp).
  LocalReduce local_reduce = LocalReduce::kNone;
};

struct WorkloadConfig {
  WorkloadKind kind = WorkloadKind::kSynthetic;  // mlp: the tensors are the MLP's ([train])
  std::vector<std::uint64_t> tensor_bytes;  // declared tensors in layer order (earlier = higher priority)
  std::uint64_t model_bytes = 0;            // alternative: split equally into `tensors` tensors
  int tensors = 0;
  double compute_s = 0.01;  // per iteration, before pushing
  int iterations = 5;
  PayloadMode payload = PayloadMode::kReal;
  // Where a worker's tensors live: host memory, or a GPU (copied device -> host into the staging buffer,
  // aggregates host -> device; the simulator charges both at cluster.pcie_bandwidth).
  DeviceKind device = DeviceKind::kCpu;
  double sum_bandwidth_Bps = 5e9;  // server float32 summation speed (cost model)
  // Compute per layer: forward of layer l once its pull is in, backward in reverse with each layer's
  // pushes released as its backward ends (wait-free backprop, ByteScheduler's overlap).
  bool layerwise = false;
  double forward_share = 1.0 / 3;  // of an iteration's compute, the rest is backward
};

// workload.kind = "mlp": a real MLP trained on Fashion-MNIST through the parameter server.
struct TrainConfig {
  std::vector<std::uint64_t> layers{784, 256, 128, 10};  // input, hidden..., classes
  int batch = 32;                                        // per worker and iteration
  double learning_rate = 0.05;
  double momentum = 0.9;
  double weight_decay = 0;
  ShardingKind sharding = ShardingKind::kIid;
  double dirichlet_alpha = 1.0;
  int eval_every = 50;  // test accuracy every this many iterations (0: only at the end)
  std::string dataset = "/usr/share/datasets/fashion-mnist";
  std::string lr_schedule = "constant";  // constant | cosine (to learning_rate * lr_final at the end)
  double lr_final = 0.1;
  int local_steps = 1;           // H: SGD steps per round on the worker's replica, the summed gradient pushed
  double participation = 1.0;    // sync: share of workers taking part in each round (seeded, ps/round_plan)
  double drop_rate = 0.0;        // sync: a participant skips pushing each tensor with this probability
  bool worker_momentum = false;  // workers push their momentum buffer; servers apply plain SGD
};

// [zeno]: the robust aggregation rule (ZenoPS) and its parameters, as src/zeno/rules.hpp names them.
// With roles.validators = 0 servers apply the rule per key; otherwise validators apply it to whole updates.
struct ZenoScenarioConfig {
  std::string rule = "mean";
  int trim = 1;            // trimmed-mean b
  int krum_byzantine = 1;  // krum f
  int krum_select = 1;     // multi-krum m
  double clip_tau = 1.0;   // centered-clipping radius
  int clip_iterations = 3;
  double gamma = 0.1;   // zeno / zeno++ trial step
  double rho = 0.0005;  // zeno
  int drop = 1;         // zeno b
  double zenops_rho = 0.0;
  double norm_bound = 1.6;
  bool per_tensor = true;
  int local_steps = 1;  // H: the validator's reference is its mean gradient over H local SGD steps
  double zenopp_rho = 0.001;
  double epsilon = 0.1;
  std::string scaling = "rescale";
  double clip_factor = 1.0;  // zeno++ clip: g shortened to at most clip_factor ||v||
  bool reverse_rejected = false;
  int refresh_every = 1;  // Zeno++ k: a fresh reference every k judged updates
  int validator_batch = 64;
  int validator_samples = 2000;
  bool duplicate_candidates = false;  // fault hook: servers forward every candidate twice
};

// [attack]: Byzantine workers (src/zeno/attacks.hpp): a fixed set, or every push with a probability.
struct AttackScenarioConfig {
  std::string kind = "none";
  std::vector<std::uint64_t> byzantine;  // worker ranks
  double probability = 0;
  double scale = 4.0;    // sign-flip and norm-matched
  double sigma = 1.0;    // gaussian
  double epsilon = 0.1;  // ipm
  double bit_rate = 0.001;
  double alie_z = 0;           // 0: derived from n and f
  double margin = 0.3;         // validator attack: <u,v> aims at (rho + margin) ||v||^2
  double norm_fraction = 0.5;  // validator attack: ||u||^2 = fraction * c * ||v||^2
};

struct StagingConfig {
  bool enabled = true;
  StagingNaming naming = StagingNaming::kPerRank;
  double copy_bandwidth_Bps = 5e9;  // memcpy into the staging buffer (cost model)
  std::string job = "job0";
};

struct PerturbationConfig {
  double delivery_jitter_s = 0;  // extra delay per message, uniform in [0, x]
  double executor_jitter_s = 0;  // extra delay before each executor task, uniform in [0, x]
  double compute_jitter_s = 0;   // extra compute per iteration per worker, uniform in [0, x]
  double start_jitter_s = 0;     // node start offset, uniform in [0, x]
};

// [cpu]: the CPU time a van spends on each message, which the simulator charges on a node's "net"
// lane (one per node, serial): a message leaves after its send cost ran, and reaches the protocol
// after its receive cost ran. `pstwin calibrate` measures them on the real vans. 0: not modelled.
struct CpuConfig {
  double send_per_message_s = 0;
  double receive_per_message_s = 0;
  double send_bandwidth_Bps = 0;  // per-byte part: bytes / this (0: none)
  double receive_bandwidth_Bps = 0;
  // A message's bytes past its first cache_bytes go at these rates instead: a copy, checksum or sum
  // of a message larger than a core's cache runs at memory speed (0 or no cache_bytes: the rates
  // above for every byte).
  std::uint64_t cache_bytes = 0;
  double send_bandwidth_beyond_cache_Bps = 0;
  double receive_bandwidth_beyond_cache_Bps = 0;
  // How long a node's van takes to wake for a message that finds it idle (its net lane free, its
  // loop with nothing queued): latency, not CPU, so no lane or core is held meanwhile.
  double wakeup_s = 0;
  // The cores the net lanes of the nodes on one host (core_scope "host") or of every host
  // ("machine": a loopback or namespace cluster on one machine) share; 0: a core per lane.
  int shared_cores = 0;
  std::string core_scope = "host";
  bool charged() const {
    return send_per_message_s > 0 || receive_per_message_s > 0 || send_bandwidth_Bps > 0 ||
           receive_bandwidth_Bps > 0 || send_bandwidth_beyond_cache_Bps > 0 ||
           receive_bandwidth_beyond_cache_Bps > 0 || wakeup_s > 0;
  }
  double send_cost(std::uint64_t bytes) const {
    return cost(send_per_message_s, send_bandwidth_Bps, send_bandwidth_beyond_cache_Bps, bytes);
  }
  // The per-byte part of a receive, read while the message is sent (receive_per_message_s follows).
  double receive_bytes_cost(std::uint64_t bytes) const {
    return cost(0, receive_bandwidth_Bps, receive_bandwidth_beyond_cache_Bps, bytes);
  }

 private:
  double cost(double per_message_s, double bandwidth_Bps, double beyond_cache_Bps,
              std::uint64_t bytes) const {
    const std::uint64_t cached =
        cache_bytes > 0 && beyond_cache_Bps > 0 ? std::min(bytes, cache_bytes) : bytes;
    const auto per_byte = [](std::uint64_t n, double Bps) {
      return Bps > 0 ? static_cast<double>(n) / Bps : 0;
    };
    return per_message_s + per_byte(cached, bandwidth_Bps) + per_byte(bytes - cached, beyond_cache_Bps);
  }
};

struct NetworkModelConfig {
  std::string model = "LV08";   // SimGrid network model: LV08 | CM02 | SMPI
  double bandwidth_factor = 0;  // 0: the model's own (LV08: 0.97)
  // LV08's own factor (13.01) models a fresh TCP connection; on open connections it is 2-7x too
  // pessimistic for 100 KB-1 MB messages (findings.md), so pstwin defaults to 1. 0: the model's own.
  double latency_factor = 1;
  double tcp_gamma = 0;  // 0: SimGrid's default (4194304)
};

struct InvariantsConfig {
  bool aggregates = true;      // every aggregate equals the exact sum of its distinct contributions
  bool updates = true;         // no update applied twice or lost
  bool sync_identical = true;  // sync mode: all workers hold identical parameters after each iteration
  double bound_tolerance = 0;  // > 0: violation if mean iteration time exceeds bound * (1 + tolerance)
};

struct OutputConfig {
  bool trace = true;
  std::uint64_t trace_max_events = 200000;
  // A window of the trace: [from, until) iterations, and keys; empty: all. Spans of other iterations
  // or keys are not recorded (spans without a key or iteration always are).
  std::vector<std::uint64_t> trace_iterations;
  std::vector<std::uint64_t> trace_keys;
  bool traces(std::uint64_t key, std::uint32_t iteration) const {
    if (trace_iterations.size() == 2 && (iteration < trace_iterations[0] || iteration >= trace_iterations[1]))
      return false;
    return trace_keys.empty() || std::find(trace_keys.begin(), trace_keys.end(), key) != trace_keys.end();
  }
};

struct SimConfig {
  double max_time_s = 3600;  // simulated-time guard: a run still going then has stalled
  int stack_size_kb = 128;
  std::vector<std::string> simgrid_config;  // extra "name:value" settings, as SimGrid's --cfg takes them
  // At most this many bulk messages in transmission per node at once (0: no limit, one per stream).
  // A node's NIC stays as busy either way; a limit trades per-flow fairness for solver speed.
  int node_flow_limit = 0;
  // > 0: each node sends through FPT's send pool (src/fpt/send_pool.hpp), which keeps at most this
  // many bulk messages in transmission, one per connection, connections taking turns by weighted DRR.
  int send_pool_slots = 0;
  // true: a connection's bulk message ready while the previous one is on the wire follows its bytes,
  // paying only what is left of its route's latency (a byte stream's pipelining; "flow" model only).
  // false: each message waits its route's latency in turn.
  bool pipeline_messages = false;
  // "simgrid": SimGrid's network model shares bandwidth. "flow": pstwin's own max-min flow model
  // (sim/flow_network.hpp), same sharing rules, cost local to the links a flow touches. "fifo":
  // packets queued at every link (sim/fifo_network.hpp).
  std::string network_model = "simgrid";
  // network_model = "fifo": how a host's connections reach its NIC. "epoll": the epoll van on Linux,
  // a message enters the host's queue whole, a paced connection a message at a time, receive shaping
  // delays what the reader takes. "kernel-pacing": the same with SO_MAX_PACING_RATE's bursts.
  // "turns": the NIC takes turns among messages a packet each, pacing and shaping bound the packets.
  std::string fifo_host = "epoll";
  // network_model = "fifo": "tbf": every link a token bucket as `pstwin run --netns` shapes it
  // (max(16 KB, 1 ms at its rate)); "none": a packet always takes size / rate.
  std::string fifo_link_bucket = "tbf";
};

// Real runs (`pstwin run`, `pstwin node`); sim.max_time is the simulator's (simulated-time) guard.
struct RunConfig {
  double time_limit_s = 3600;  // wall clock: a real job (or node) still running then is stopped and fails
};

// ps.balancing = "lb": the scheduler's load balancer (src/ps/load_balancer.hpp, docs/FPT.md).
struct LbConfig {
  Balancing balancing = Balancing::kHash;  // ps.balancing; hash: ps.key_hash decides, as in BytePS
  std::vector<std::uint64_t> probe_at;     // iterations run in the probe state on request (0 always is)
  double rebalance_threshold = 0.02;       // keep a decision unless a new one is predicted this much faster
  // Where the workers' NICs differ, each server holds every worker's connection, both ways, to an
  // equal share of its NIC (kHoldEveryPeer): every worker brings it the same bytes and each key waits
  // for all of them.
  bool server_equal_shares = true;
  std::vector<std::uint64_t> missing_measurements;  // fault: servers report no measurement in these
  bool worker_aggregators = false;  // workers own and aggregate ranges of keys too (docs/FPT.md)
};

// [faults] (docs/FAULTS.md). One side of a partition or clog: hosts ("h1") or nodes ("worker 1", as in
// results.json); exactly one of the two lists is set. Traffic between that side and everything else is hit.
struct FaultSide {
  std::vector<std::string> hosts;
  std::vector<std::string> nodes;
  friend bool operator==(const FaultSide&, const FaultSide&) = default;
};

// Messages between the side and the rest are dropped while simulated time is in [from, until).
struct PartitionFault {
  FaultSide side;
  double from_s = 0;
  double until_s = 0;
  friend bool operator==(const PartitionFault&, const PartitionFault&) = default;
};

// Messages between the side and the rest that would start in [from, from + duration) wait until its end,
// then flow in order (FoundationDB's clogging).
struct ClogFault {
  FaultSide side;
  double from_s = 0;
  double duration_s = 0;
  friend bool operator==(const ClogFault&, const ClogFault&) = default;
};

// The node's executor tasks (compute, engine, copy, push) that start in [from, until) take `factor` x
// as long.
struct SlowFault {
  std::string node;
  double factor = 1;
  double from_s = 0;
  double until_s = std::numeric_limits<double>::infinity();
  friend bool operator==(const SlowFault&, const SlowFault&) = default;
};

// The node stops dead (kill -9) at a simulated time, or (a worker) as it starts an iteration: it
// handles, sends and answers nothing more.
struct CrashFault {
  std::string node;
  std::optional<double> at_s;              // a time ...
  std::optional<std::uint32_t> iteration;  // ... or, for a worker, the iteration it would start
  friend bool operator==(const CrashFault&, const CrashFault&) = default;
};

struct FaultsConfig {
  double scheduler_start_delay_s = 0;  // start the scheduler late (tests the connect timeout)
  double loss = 0;                     // probability that a message is lost, in [0, 1)
  double duplicate = 0;                // probability that a message is delivered twice, in [0, 1)
  std::string message_class = "all";   // what loss and duplicate hit: "all" | "control" | "data"
  std::vector<PartitionFault> partitions;
  std::vector<ClogFault> clogs;
  std::vector<SlowFault> slow;
  std::vector<CrashFault> crashes;

  // Whether any fault may drop or double a message (the default of ps.resend).
  bool drops_or_doubles() const { return loss > 0 || duplicate > 0 || !partitions.empty(); }
  bool any() const { return drops_or_doubles() || !clogs.empty() || !slow.empty() || !crashes.empty(); }
};

// ps.balancing = "lb": the partitioning the run uses, each value chosen by pstwin from the cluster's
// links where the scenario left the field unset, else the scenario's (src/scenario/lb_tuning.hpp).
struct LbChoice {
  std::uint64_t partition_bytes = 0;
  int scheduling_credit = 0;
  bool fused = false;
  bool chose_partition_bytes = false;  // false: the scenario (or --set) gave ps.partition_bytes
  bool chose_scheduling_credit = false;
  bool chose_push_pull = false;
  // The simulator's transport (sim.*: ignored by real runs, whose vans always send through their pool
  // and byte streams): the send pool with a slot per connection, pstwin's flow model (the one whose
  // flows take the pool's pacing and the receivers' shaping) and pipelined messages.
  int send_pool_slots = 0;
  std::string network_model;
  bool pipeline_messages = false;
  bool chose_send_pool_slots = false;
  bool chose_network_model = false;
  bool chose_pipeline_messages = false;
  friend bool operator==(const LbChoice&, const LbChoice&) = default;
};

struct Scenario {
  std::string name = "unnamed";
  std::string description;
  std::uint64_t seed = 1;
  ClusterConfig cluster;
  RolesConfig roles;
  PsConfig ps;
  WorkloadConfig workload;
  TrainConfig train;
  ZenoScenarioConfig zeno;
  AttackScenarioConfig attack;
  StagingConfig staging;
  PerturbationConfig perturbation;
  CpuConfig cpu;
  NetworkModelConfig network;
  InvariantsConfig invariants;
  OutputConfig output;
  SimConfig sim;
  RunConfig run;
  FaultsConfig faults;
  LbConfig lb;
  std::optional<LbChoice> lb_chosen;  // ps.balancing = "lb" only

  std::string source_path;  // the file it was loaded from ("" if built in code)
  std::vector<std::pair<std::string, std::string>> overrides;  // --set FIELD=VALUE, in order

  // Derived after validation:
  // tensor_bytes, or model_bytes split; mlp: W1, b1, W2, b2, ... of train.layers
  std::vector<std::uint64_t> declared_tensor_bytes() const;
  int host_count() const;                  // resolved number of hosts
  std::string host_name(int index) const;  // "h<index>"
  std::string scheduler_host_name() const;
  std::string server_host_name(int rank) const;
  std::string worker_host_name(int rank) const;
  std::string validator_host_name(int rank) const;
  // A host's link: its [cluster.links.HOST] override, else cluster.host_bandwidth and host_latency.
  LinkSpec host_link(const std::string& host) const;
  // ps.resend as resolved: the field if set, else whether a fault may drop or double messages.
  bool resend_enabled() const { return ps.resend.value_or(faults.drops_or_doubles()); }
};

// Thrown for any scenario problem; what() names the file, line (when known), field, value and a fix.
class ScenarioError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Loads and validates a scenario file, applying `overrides` (dotted path, value text) on top.
// Values of overrides are parsed as TOML values ("4", "\"x\"", "[1,2]", "true") and, failing that,
// as plain strings ("legacy-key-only", "10Gbps").
Scenario load_scenario(const std::string& path,
                       const std::vector<std::pair<std::string, std::string>>& overrides = {});
Scenario parse_scenario(std::string_view toml_text, const std::string& source_name,
                        const std::vector<std::pair<std::string, std::string>>& overrides = {});

// The fully resolved scenario as TOML (every field, defaults included), loadable again.
std::string resolved_toml(const Scenario& scenario);

// The fields every node of one job must agree on, as (path, value text) in registry order: what a
// node registering with the scheduler is checked against (src/ps/scheduler.cpp). Left out: labels
// (name, description), what each node records or checks of itself (output, invariants), its own
// waits and limits (ps.connect_timeout, run), the simulator's platform, placement, network, jitter
// and faults (cluster, roles.*_host(s), network, perturbation, sim, faults), paths on each machine
// (train.dataset), and the seed unless something the nodes share is drawn from it (the MLP's initial
// model and shards, train.participation and drop_rate round plans). A field added later counts.
std::vector<std::pair<std::string, std::string>> job_fields(const Scenario& scenario);
// A 16-hex-digit digest (core/digest.hpp) of job_fields(): equal digests, same job.
std::string job_digest(const Scenario& scenario);
std::string job_digest(const std::vector<std::pair<std::string, std::string>>& fields);

// Reference of every field (path, type, default, meaning) as Markdown tables, one per TOML table,
// generated from the field registry; docs/SCENARIOS.md embeds it (a test keeps the two in sync).
std::string scenario_reference_markdown();

// Text of each enum as it appears in files.
std::string_view to_string(Topology value);
std::string_view to_string(TrainingMode value);
std::string_view to_string(KeyHash value);
std::string_view to_string(PayloadMode value);
std::string_view to_string(StagingNaming value);
std::string_view to_string(WorkloadKind value);
std::string_view to_string(ShardingKind value);
std::string_view to_string(PushPullMode value);
std::string_view to_string(Balancing value);
std::string_view to_string(DeviceKind value);
std::string_view to_string(LocalReduce value);

// Whether this build has the CUDA device path (CMake option PSTWIN_CUDA): without it workload.device =
// "cuda" is refused.
bool built_with_cuda();
// Whether ps.local_reduce = "nccl" can run: CUDA and NCCL were found at configure time (PSTWIN_NCCL).
bool built_with_nccl();

}  // namespace pstwin
