#include "scenario/lb_tuning.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace pstwin {

namespace {

// The slowest aggregator's share should span this many partitions. A sync iteration fills and drains
// the pipeline: an aggregator answers a key only once every worker's push of it is in, so its uplink
// starts about a credit's worth of partitions late and its downlink idles as long at the end, c p of
// its share M_j each way. With c about 3, M_j / p = 100 keeps that near 3 %; it also keeps the load
// balancer's whole-partition shares within 1 % of the proportional ones.
constexpr double kPartitionsPerShare = 100;
// What one message costs beyond its bytes: the epoll van pipelines 4 KB messages at 0.35 GB/s, about
// 12 us each (docs/PERFORMANCE.md), and the share of a partition's wire time that may go to it. That
// CPU runs beside the wire (the van's thread hands over the next message while the NIC carries the
// previous one's bytes, a byte stream pays no latency per message), so it costs nothing while it stays
// under the wire time; at half of it the van keeps its NIC busy with twice the CPU to spare. A larger
// floor costs more than it saves: on small models over many servers a server's share is then a
// handful of partitions, whose fill and drain (and whole-partition shares) take 20-45 % on top
// (bench/lb_family.py, docs/PERFORMANCE.md).
constexpr double kMessageCost_s = 10e-6;
constexpr double kMessageCostShare = 0.5;
// The balancer measures every aggregator in its probes (an equal split) and a rate needs two messages
// from a worker: at least this many partitions per aggregator, whatever a message costs.
constexpr double kMinPartitionsPerAggregator = 4;
// BytePS's default: larger partitions only delay the first aggregate.
constexpr std::uint64_t kMaxPartition = 4096000;
constexpr std::uint64_t kPartitionStep = 4096;
// How far above the size asked equal pieces of a tensor may go once rounded up to the step.
constexpr double kEvenSlack = 1.125;
// Pushes in flight per server beyond the round trip's bytes: one arriving while the previous one's
// aggregate comes back.
constexpr int kBaseCredit = 2;
constexpr int kMaxCredit = 32;

// `value` limited to [low, high]; NaN (an infinite bandwidth over an infinite sum) counts as `high`.
double bounded(double value, double low, double high) {
  return value >= low ? std::min(value, high) : (value < low ? low : high);
}

std::uint64_t round_up_to_step(double bytes) {
  return static_cast<std::uint64_t>(std::ceil(bytes / static_cast<double>(kPartitionStep))) * kPartitionStep;
}

// Partitions of `tensors` at `partition_bytes` each (a tensor's last one takes what is left).
double partition_count(const std::vector<std::uint64_t>& tensors, std::uint64_t partition_bytes) {
  double count = 0;
  for (const auto bytes : tensors)
    count += std::ceil(static_cast<double>(bytes) / static_cast<double>(partition_bytes));
  return count;
}

// A tensor's last partition costs a whole message (a message's CPU on a van) for what is left of the
// tensor: 137.5 KB tensors at 120 KiB went as 120 KiB + 17.5 KB, twice the messages of whole tensors.
// So `wanted` is moved to the size that cuts the largest tensor into round(t / wanted) equal pieces
// (at most 1.5x or 0.75x away, less the more pieces; kept where the step's rounding would take it
// more than kEvenSlack above), unless that leaves fewer than `fewest` partitions in all: then into
// ceil(t / wanted), which never gives fewer partitions than `wanted` did.
std::uint64_t even_partitions(const std::vector<std::uint64_t>& tensors, double wanted, double fewest) {
  const auto largest = static_cast<double>(*std::ranges::max_element(tensors));
  const double most_pieces = std::ceil(largest / wanted);
  const double pieces =
      std::max({1.0, std::round(largest / wanted), std::ceil(largest / static_cast<double>(kMaxPartition))});
  const std::uint64_t even = std::min(round_up_to_step(largest / pieces), kMaxPartition);
  // Small partitions: rounding a piece up to the step can take it far above `wanted` (8,333 B pieces
  // of 116,667 B tensors become 12,288 B, half as much again): then `wanted` with a remainder.
  if (partition_count(tensors, even) >= fewest)
    return static_cast<double>(even) > kEvenSlack * wanted ? static_cast<std::uint64_t>(wanted) : even;
  return std::min(round_up_to_step(largest / most_pieces), kMaxPartition);
}

}  // namespace

LbTuning lb_tuning(const Scenario& scenario, std::optional<std::uint64_t> partition_bytes) {
  std::vector<double> aggregators;  // receive bandwidth of every node that may own keys
  double max_server_latency = 0;
  for (int j = 0; j < scenario.roles.servers; ++j) {
    const LinkSpec link = scenario.host_link(scenario.server_host_name(j));
    aggregators.push_back(link.bandwidth_Bps);
    max_server_latency = std::max(max_server_latency, link.latency_s);
  }
  double max_worker_bandwidth = 0;
  double max_worker_latency = 0;
  for (int w = 0; w < scenario.roles.workers; ++w) {
    const LinkSpec link = scenario.host_link(scenario.worker_host_name(w));
    max_worker_bandwidth = std::max(max_worker_bandwidth, link.bandwidth_Bps);
    max_worker_latency = std::max(max_worker_latency, link.latency_s);
    if (scenario.lb.worker_aggregators) aggregators.push_back(link.bandwidth_Bps);
  }
  const auto declared = scenario.declared_tensor_bytes();
  const double model_bytes = std::accumulate(declared.begin(), declared.end(), 0.0,
                                             [](double sum, std::uint64_t bytes) { return sum + bytes; });
  const double total_bandwidth = std::accumulate(aggregators.begin(), aggregators.end(), 0.0);
  const double slowest = *std::ranges::min_element(aggregators);

  // Fine-grained: the slowest aggregator's proportional share (M B_min / sum B) in kPartitionsPerShare
  // partitions. Not so small that per-message costs show: a partition takes at least
  // kMessageCost / kMessageCostShare on the fastest link it crosses (a worker's or a server's), unless
  // the balancer could then not measure every aggregator.
  const double fine = model_bytes * slowest / (kPartitionsPerShare * total_bandwidth);
  const double fastest = std::max(max_worker_bandwidth, *std::ranges::max_element(aggregators));
  // To the nearest step (at least one), so that rounding the size down below does not take it far
  // under the floor (6,250 B at 2.5 Gb/s went to 4 KiB).
  const double floor_bytes = kMessageCost_s / kMessageCostShare * fastest;
  const double step = static_cast<double>(kPartitionStep);
  const double cheap =
      std::isfinite(floor_bytes) ? std::max(1.0, std::round(floor_bytes / step)) * step : floor_bytes;
  const double measurable =
      model_bytes / (kMinPartitionsPerAggregator * static_cast<double>(aggregators.size()));
  const double wanted =
      bounded(std::min(std::max(fine, cheap), measurable), 0, static_cast<double>(kMaxPartition));
  const auto steps = static_cast<std::uint64_t>(wanted / static_cast<double>(kPartitionStep));
  const std::uint64_t stepped = wanted >= static_cast<double>(kMaxPartition)
                                    ? kMaxPartition
                                    : std::max<std::uint64_t>(1, steps) * kPartitionStep;
  LbTuning tuning;
  if (partition_bytes) {
    tuning.partition_bytes = *partition_bytes;
  } else if (declared.empty()) {
    tuning.partition_bytes = stepped;
  } else {
    const double fewest = std::min(kMinPartitionsPerAggregator * static_cast<double>(aggregators.size()),
                                   partition_count(declared, stepped));
    tuning.partition_bytes = even_partitions(declared, static_cast<double>(stepped), fewest);
  }

  // Credit per server: the bytes a worker can send during one round trip to a server (its
  // bandwidth-delay product), in partitions, on top of kBaseCredit.
  const double round_trip = 2 * (max_worker_latency + max_server_latency);
  const double in_flight = max_worker_bandwidth * round_trip / static_cast<double>(tuning.partition_bytes);
  tuning.scheduling_credit =
      kBaseCredit + static_cast<int>(std::ceil(bounded(in_flight, 0, kMaxCredit - kBaseCredit)));

  // Fused: a separate pull waits behind up to `credit` queued pushes to a slow server. Validators
  // need the pull separate (the aggregate waits for their verdict).
  tuning.fused = scenario.roles.validators == 0;

  // A node connects to every other: the scheduler, the servers, the workers and the validators.
  tuning.send_pool_slots = 1 + scenario.roles.servers + scenario.roles.workers + scenario.roles.validators;
  // The flow model shares bandwidth by LV08's and CM02's rules and takes rate bounds; SMPI's
  // size-dependent factors need SimGrid's own solver (which cannot pace).
  tuning.network_model = scenario.network.model == "SMPI" ? "simgrid" : "flow";
  tuning.pipeline_messages = true;
  return tuning;
}

}  // namespace pstwin
