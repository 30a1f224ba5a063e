// What a run produced, independent of the backend: written as results.json (and trace.json).
// Same scenario + same seed => byte-identical results.json except wall_s.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/runtime.hpp"
#include "ps/control.hpp"
#include "ps/faults.hpp"
#include "ps/invariants.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

struct IterationTime {
  int index = 0;
  double time_s = 0;  // the slowest worker's duration of this iteration
};

struct LinkUsage {
  std::string name;
  std::uint64_t bytes = 0;
  // The simulated or emulated (--netns) bandwidth and bytes / (bandwidth * run time); both absent
  // on loopback real runs, where no bandwidth was emulated and bytes are all there is.
  std::optional<double> bandwidth_Bps = std::nullopt;
  std::optional<double> utilization = std::nullopt;
  // Namespace clusters only (absent elsewhere): utilisation over the push/pull phase (docs/FPT.md),
  // packets tbf dropped on this direction, TCP segments the host retransmitted (on `.up`).
  std::optional<double> phase_utilization = std::nullopt;
  // Utilisation over time, where a bandwidth is known: one value per bucket of over_time_width_s
  // from the run's start (simulated time, or the job's start on a namespace cluster).
  std::vector<double> over_time = {};
  double over_time_width_s = 0;
  std::optional<std::uint64_t> drops = std::nullopt;
  std::optional<std::uint64_t> retransmitted = std::nullopt;
};

// Bytes (header and payload) of the messages whose sender and recipient are on different scenario
// hosts, as the scenario places the nodes: what crosses host NICs in the simulator and on a cluster,
// counted the same way by `pstwin run` on one machine. `push_pull_bytes`: of push, pull and push_pull
// requests and responses only (the model's traffic; the rest is control: registration, heartbeats).
struct CrossHostTraffic {
  std::uint64_t bytes = 0;
  std::uint64_t push_pull_bytes = 0;
  void add(Command command, std::uint64_t wire_bytes) {
    bytes += wire_bytes;
    if (command == Command::kPush || command == Command::kPull || command == Command::kPushPull)
      push_pull_bytes += wire_bytes;
  }
  CrossHostTraffic& operator+=(const CrossHostTraffic& other) {
    bytes += other.bytes;
    push_pull_bytes += other.push_pull_bytes;
    return *this;
  }
};

struct Bound {
  double time_s = 0;  // lower bound on one iteration's time
  std::string formula;
  double achieved_s = 0;  // the run's iteration time it stands next to (lb: the balanced iterations' mean)
};

// ps.balancing = "lb": the scheduler's decisions and the servers' measured receive rates.
struct LbDecisionRecord {
  std::uint32_t iteration = 0;
  std::uint32_t version = 0;
  bool probe = false;
  std::string reason;
  std::vector<std::uint64_t> bytes_per_server;
};
struct LbRateRecord {
  std::uint32_t iteration = 0;
  int server = 0;
  double rate_Bps = 0;     // bytes received / busy time, by the server's monitor
  double utilization = 0;  // rate / the server NIC's nominal bandwidth
};
struct BalancingReport {
  std::vector<LbDecisionRecord> decisions;
  std::vector<LbRateRecord> measured;
  double balanced_mean_s = 0;  // mean iteration time over iterations not in the probe state
  int balanced_iterations = 0;
};

// How a real run reproduced the scenario's network (absent from sim and plain-loopback reports).
struct NetworkEmulation {
  std::string method;             // "netns": `pstwin run --netns`
  bool latency_emulated = false;  // false: link latency is the machine's, not the scenario's
  std::string note;
};

// workload.kind = "mlp": test accuracy of worker 0's parameters along the run.
struct AccuracyPoint {
  std::uint32_t iteration = 0;  // iterations completed
  double time_s = 0;            // since worker 0's first iteration began (sim: simulated seconds)
  double accuracy = 0;          // on the 10,000 test images
};
// Where a training run diverged: the first evaluated point after which it never learned again.
struct Divergence {
  std::uint32_t iteration = 0;
  std::string reason;  // "non-finite parameters" or "accuracy collapsed to chance (<= 0.15)"
};
struct AccuracyCurve {
  double final_accuracy = 0;
  std::vector<AccuracyPoint> curve;
  std::optional<Divergence> diverged;
};
nlohmann::ordered_json accuracy_json(const AccuracyCurve& accuracy);
nlohmann::ordered_json balancing_json(const BalancingReport& balancing);
BalancingReport balancing_from_json(const nlohmann::json& json);
// results.json `lb.chosen`: the partitioning values, and which of them pstwin chose ("chosen_fields").
nlohmann::ordered_json lb_choice_json(const LbChoice& choice);
LbChoice lb_choice_from_json(const nlohmann::json& json);
AccuracyCurve accuracy_from_json(const nlohmann::json& json);

// ZenoPS validators: how many workers' updates they judged and accepted, per worker rank.
struct ValidationSummary {
  std::uint64_t judged = 0;
  std::uint64_t accepted = 0;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> per_worker;  // (judged, accepted) by rank
};
nlohmann::ordered_json validation_json(const ValidationSummary& validation);
ValidationSummary validation_from_json(const nlohmann::json& json);
// Adds `more` (another validator's workers) into `into`, worker by worker.
void add_validation(ValidationSummary& into, const ValidationSummary& more);

// A robust rule on the servers (zeno.rule without validators): what it made of each worker's gradients,
// one judgement per (key, round, worker).
struct SelectionSummary {
  struct Worker {
    std::uint64_t judged = 0;
    std::uint64_t accepted = 0;
    double share_sum = 0;  // CandidateJudgement::share summed: / judged is the mean share
  };
  std::string rule;
  std::uint64_t judged = 0;
  std::uint64_t accepted = 0;
  std::map<std::string, std::uint64_t> verdicts;  // by verdict name
  std::vector<Worker> per_worker;                 // by rank
};
nlohmann::ordered_json selection_json(const SelectionSummary& selection);
SelectionSummary selection_from_json(const nlohmann::json& json);
// Adds `more` (another server's keys) into `into`.
void add_selection(SelectionSummary& into, const SelectionSummary& more);

// Async with ps.max_staleness: the servers' pushes (per key partition) by staleness, i.e. how many
// versions of the key were applied between the worker's last pull of it and the push's arrival.
struct StalenessSummary {
  std::uint64_t bound = 0;                        // ps.max_staleness
  std::uint64_t applied = 0;                      // pushes within the bound
  std::uint64_t refused = 0;                      // pushes beyond it: acknowledged, never applied
  std::uint64_t max_applied = 0;                  // the largest staleness of an applied push (<= bound)
  std::uint64_t max_seen = 0;                     // the largest staleness of any push
  std::vector<std::uint64_t> refused_per_worker;  // by rank
};
nlohmann::ordered_json staleness_json(const StalenessSummary& staleness);
StalenessSummary staleness_from_json(const nlohmann::json& json);
// Adds `more` (another server's keys) into `into`: counts summed, largest stalenesses kept.
void add_staleness(StalenessSummary& into, const StalenessSummary& more);

// What a span worked on (trace.json "args"), so a trace answers per-key questions: when each
// worker's push of a key reached its aggregator, how long the reply took (docs/FPT.md), whose copy
// into which staging buffer overlapped whose send (docs/TRACE.md).
struct TraceMessage {
  std::uint64_t key = 0;
  std::uint32_t iteration = 0;
  std::uint64_t bytes = 0;  // send and receive: on the wire, header and payload; else the payload
  int worker = -1;          // copy, push, aggregate: the worker whose push it is; -1: none
  std::string buffer = {};  // copy, push: the staging buffer's name; "": none
};
inline TraceMessage trace_message(const SpanTags& tags) {
  return {tags.key, tags.iteration, tags.bytes, tags.worker, tags.buffer};
}

struct TraceSpan {
  std::string process;  // node label, e.g. "worker 0 (h1)"
  int pid = 0;
  std::string thread;  // lane: "main", "copy", "engine.2", "send->server 0", ...
  std::string category;
  std::string name;
  double start_s = 0;
  double end_s = 0;
  std::optional<TraceMessage> message;  // send, receive and tagged spans (copy, push, aggregate)
};

// Where the time went (simulator). Per worker and iteration, the iteration's time split by what the
// worker was doing, each instant counted once, the first that applies: computing, a push in flight
// (from the credit letting it go to its acknowledgement), a staged partition waiting for credit,
// copying into staging, receiving a pull response, else waiting for the aggregate. Per server: busy
// aggregating, receiving or sending (each instant once), and idle.
struct WorkerTimes {
  int worker = 0;
  std::uint32_t iteration = 0;
  double compute_s = 0;
  double push_s = 0;
  double credit_wait_s = 0;
  double copy_s = 0;
  double pull_s = 0;
  double aggregate_wait_s = 0;
};
struct ServerTimes {
  std::string server;  // "server 0"
  double aggregate_s = 0;
  double receive_s = 0;
  double send_s = 0;
  double idle_s = 0;  // run time when it did none of these
};
struct TimeBreakdown {
  std::vector<WorkerTimes> workers;
  std::vector<ServerTimes> servers;
  std::string largest;  // one sentence naming the largest share and its cause
};
nlohmann::ordered_json breakdown_json(const TimeBreakdown& breakdown);

struct RunReport {
  std::string scenario;
  std::string backend;  // "sim" or "real"
  std::string van;      // the real backend's transport, "zmq" or "epoll"; "" for sim
  std::uint64_t seed = 0;
  bool completed = false;
  std::string failure;  // why the run did not complete ("" if it did)
  std::vector<IterationTime> iterations;
  std::uint64_t invariants_checked = 0;
  std::uint64_t violation_count = 0;
  std::vector<Violation> violations;
  InvariantTallies invariant_tallies;
  std::vector<LinkUsage> links;
  std::optional<NetworkEmulation> emulation;
  std::string model_digest;
  std::optional<AccuracyCurve> accuracy;        // mlp runs only
  std::optional<SelectionSummary> selection;    // a robust zeno.rule on the servers (pstwin run: summed)
  std::optional<ValidationSummary> validation;  // runs with validators (pstwin run: the validators summed)
  std::optional<std::uint64_t> late_pushes;     // ps.backup_workers: pushes dropped as late
  std::optional<StalenessSummary> staleness;    // async with ps.max_staleness (in-process backends)
  std::optional<Bound> bound;
  std::optional<BalancingReport> balancing;
  std::optional<LbChoice> lb_chosen;       // results.json `lb.chosen`
  std::optional<FaultCounts> faults;       // scenarios with [faults] or ps.resend (sim)
  std::optional<TimeBreakdown> breakdown;  // sim
  // Real runs: what each node refused (malformed, forged, unauthenticated, over the limits), by node,
  // then by peer ("node 9", or the host of connections that never proved membership). Empty: nothing.
  std::map<std::string, std::map<std::string, std::uint64_t>> refused;
  std::vector<NodeInfo> nodes;
  double run_time_s = 0;  // simulated (sim) or wall (real) seconds from start to the last node's stop
  std::uint64_t messages = 0;
  std::uint64_t message_bytes = 0;
  CrossHostTraffic cross_host;
  std::string replay;  // one-line command reproducing this run
  double wall_s = 0;
  std::vector<TraceSpan> trace;
  std::uint64_t trace_dropped = 0;

  double mean_iteration_s() const;
  bool ok() const { return completed && violation_count == 0; }
};

nlohmann::ordered_json to_json(const RunReport& report);
RunReport report_from_json(const nlohmann::ordered_json& json);  // without trace
// Chrome trace format (docs/TRACE.md): spans with what they worked on, flows from each copy to its
// aggregation, a marker at each violation, lanes named by role.
std::string trace_json(const RunReport& report);
// "" when the trace is whole; else a sentence saying how many events were dropped and what to do.
std::string trace_warning(const RunReport& report);

// {"aggregates": {"checked": 20, "violated": 6}, ...} and back; adds into `into` (merging node parts).
nlohmann::ordered_json tallies_json(const InvariantTallies& tallies);
void add_tallies_from_json(const nlohmann::json& json, InvariantTallies& into);

// `text` quoted for a POSIX shell (unchanged when it needs no quoting).
std::string shell_quote(const std::string& text);

// `pstwin SUBCOMMAND FILE [--seed N] --set k=v ...`, reproducing the scenario as loaded (quoted for
// a shell); no --seed when `seed` is empty.
std::string replay_command(const Scenario& scenario, std::optional<std::uint64_t> seed,
                           std::string_view subcommand = "sim");

// One node-table entry as results.json and node reports write it, and back (throws on a bad role).
nlohmann::ordered_json node_info_json(const NodeInfo& info);
template <class Json>
NodeInfo node_info_from_json(const Json& j) {
  NodeInfo info;
  info.id = j.at("id");
  const auto role = role_from_name(j.at("role").template get<std::string>());
  if (!role) throw std::runtime_error("node.role: unknown role " + j.at("role").dump());
  info.role = *role;
  info.rank = j.at("rank");
  info.address = j.at("address").template get<std::string>();
  info.host = j.at("host").template get<std::string>();
  return info;
}

// Writes results.json, trace.json (if the scenario asks for it) and resolved.toml into `dir`.
void write_outputs(const RunReport& report, const Scenario& scenario, const std::string& dir);

// results.json's `faults` section and back.
nlohmann::ordered_json faults_json(const FaultCounts& counts);
FaultCounts faults_from_json(const nlohmann::ordered_json& json);

// A few readable lines for the terminal. Violations are listed per invariant, the first few of each
// (kViolationsShown), with a line saying how many more there are and to see `results_path` ("" =
// "results.json") for them.
std::string summary_text(const RunReport& report, std::string_view results_path = {});

// How many violations of one invariant a terminal summary lists before it counts the rest.
inline constexpr std::size_t kViolationsShown = 3;

// The lines of `violations`, `prefix` before each ("    " + "[invariant] detail"), at most
// kViolationsShown per invariant in order of first appearance; then per invariant one line counting the
// rest (from `tallies` where they count more than the list holds) and saying `where` to find them.
std::string violation_lines(const std::vector<Violation>& violations, const InvariantTallies& tallies,
                            std::string_view prefix, std::string_view where);

}  // namespace pstwin
