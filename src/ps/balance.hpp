// Load balancing (FPT's LBScheduler): which server aggregates each partition. The scheduler decides
// from the bandwidths the nodes' monitors measured; every node applies a decision at the same
// iteration boundary (the decision names its first iteration). docs/FPT.md has the formulas.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/payload.hpp"
#include "core/types.hpp"
#include "ps/keys.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

struct LbDecision {
  std::uint32_t version = 0;        // grows by one whenever the assignment changes
  std::uint32_t iteration = 0;      // the iteration it applies to
  bool probe = false;               // probe state: an equal split, so every server's bandwidth is measured
  std::string reason;               // why: "start", "asked", "measurement missing ...", "measured"
  std::vector<std::int32_t> owner;  // aggregator slot per partition, in workload (push) order (slot_node)

  // Pushes a server receives in this iteration (what a receiver is told to expect).
  std::uint64_t partitions_of(int server) const;
  std::vector<std::uint64_t> bytes_per_server(std::span<const PartitionSpec> partitions, int servers) const;
  friend bool operator==(const LbDecision&, const LbDecision&) = default;
};

// What one node's monitor measured in one iteration, per peer: bytes and the time the transfer kept
// the path busy (first arrival to last, extrapolated over the first message's bytes).
struct PeerUsage {
  NodeId peer = kNoNode;
  std::uint64_t bytes = 0;
  double busy_s = 0;
  friend bool operator==(const PeerUsage&, const PeerUsage&) = default;
};
struct LbReport {
  std::uint32_t iteration = 0;
  std::uint64_t received_bytes = 0;  // from all peers together
  double receive_busy_s = 0;         // 0: not measurable (nothing, or a single message)
  std::vector<PeerUsage> peers;      // received, per sender, by node id
  double receive_rate_Bps() const { return receive_busy_s > 0 ? received_bytes / receive_busy_s : 0; }
  friend bool operator==(const LbReport&, const LbReport&) = default;
};

Payload encode_decision(const LbDecision& decision);
Payload encode_report(const LbReport& report);
// nullopt and `error` = "field: what is wrong" on a malformed body.
std::optional<LbDecision> decode_decision(const Payload& payload, std::string& error);
std::optional<LbReport> decode_report(const Payload& payload, std::string& error);

// Aggregator slots: 0..servers-1 are the servers' ranks, servers + w is worker w's aggregator
// (lb.worker_aggregators). Without worker aggregators a slot is a server rank.
NodeId slot_node(int slot, int servers);
int slot_of(NodeId node, int servers);  // -1: neither a server nor a worker
int aggregator_slots(const Scenario& scenario);

// "" if `decision` fits a job of `partitions` partitions and `slots` aggregator slots, else what is wrong.
std::string check_decision(const LbDecision& decision, std::size_t partitions, int slots);

// Partitions in push order go one by one to the server that would finish its share earliest,
// (assigned + bytes) / weight, ties to the lower rank: shares end proportional to the weights and
// each tensor is spread over the servers in the same proportion.
std::vector<std::int32_t> assign_proportional(std::span<const PartitionSpec> partitions,
                                              std::span<const double> weights);
// The probe split: equal weights (every server gets about M / servers bytes).
LbDecision probe_decision(std::span<const PartitionSpec> partitions, int servers, std::uint32_t iteration,
                          std::uint32_t version, std::string reason);
// The workers' probe (lb.worker_aggregators): an equal split over the worker aggregators only, so
// every worker's link is busy both ways and its bandwidth is measured.
LbDecision worker_probe_decision(std::span<const PartitionSpec> partitions, int servers, int workers,
                                 std::uint32_t iteration, std::uint32_t version, std::string reason);

// The split that finishes every link at once (docs/FPT.md "with worker-side aggregators"): server j
// takes s_j = T r_j / (n M), worker w x_w = (T r_w / M - 1) / (n - 2) of the model, where r are
// rates in bytes/s, n the workers, M the model's wire bytes; a worker whose x_w would be negative
// aggregates nothing and the rest is solved again. No worker rates: servers only, T = n M / sum r_j.
// `partition_bytes` p > 0: a server's uplink only starts once the first partition came in from every
// worker (n p / r_j) and so ends that much after its downlink; s_j = T r_j / (n M) - p / M finishes
// both by T (the load balancer's split; the analytic bound leaves it out, p = 0).
struct AggregatorSplit {
  double time_s = 0;           // every link's time under the split (the optimum)
  std::vector<double> shares;  // per slot (servers, then workers), summing to 1
};
AggregatorSplit optimal_split(std::span<const double> server_rates, std::span<const double> worker_rates,
                              double model_bytes, double partition_bytes = 0);

// Decisions are made kDecisionLag iterations ahead (load_balancer.hpp says why); the first
// kDecisionLag iterations run the probe split, which every node derives without a message.
inline constexpr std::uint32_t kDecisionLag = 2;

// The decisions a server or worker holds, by iteration: the first ones derived locally, later ones
// as the scheduler sends them.
class DecisionBook {
 public:
  // `workers` > 0: worker aggregators on (iteration 1 is the workers' probe).
  DecisionBook(std::span<const PartitionSpec> partitions, int servers, int workers = 0);
  // Decodes and checks a kLbDecision body: the decision added, or nullopt and `error`.
  const LbDecision* accept(const Payload& body, std::string& error);
  const LbDecision* find(std::uint32_t iteration) const;
  void forget_before(std::uint32_t iteration);

 private:
  std::size_t partitions_;
  int slots_;
  std::map<std::uint32_t, LbDecision> decisions_;
};

// Per node and iteration: bytes received per peer and when, measured with the runtime's clock.
class BandwidthMonitor {
 public:
  void received(std::uint32_t iteration, NodeId peer, std::uint64_t bytes, Seconds at);
  // The iteration's report; its records are dropped.
  LbReport take(std::uint32_t iteration);

 private:
  struct Span {
    std::uint64_t bytes = 0;
    std::uint64_t first_bytes = 0;
    Seconds first = 0, last = 0;
    void add(std::uint64_t b, Seconds at);
    double busy_s() const;
  };
  struct Iteration {
    Span total;
    std::map<NodeId, Span> peers;
  };
  std::map<std::uint32_t, Iteration> iterations_;
};

}  // namespace pstwin
