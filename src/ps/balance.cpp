#include "ps/balance.hpp"

#include <algorithm>
#include <cmath>

#include "core/codec.hpp"
#include "ps/byte_io.hpp"
#include "ps/ids.hpp"

namespace pstwin {
namespace {
constexpr std::uint32_t kMaxDecisionPartitions = 1u << 24;
}  // namespace

std::uint64_t LbDecision::partitions_of(int server) const {
  return static_cast<std::uint64_t>(std::count(owner.begin(), owner.end(), server));
}

std::vector<std::uint64_t> LbDecision::bytes_per_server(std::span<const PartitionSpec> partitions,
                                                        int servers) const {
  std::vector<std::uint64_t> bytes(static_cast<std::size_t>(servers), 0);
  for (std::size_t i = 0; i < owner.size() && i < partitions.size(); ++i)
    if (owner[i] >= 0 && owner[i] < servers) bytes[static_cast<std::size_t>(owner[i])] += partitions[i].bytes;
  return bytes;
}

NodeId slot_node(int slot, int servers) {
  return slot < servers ? server_id(slot) : worker_id(slot - servers);
}

int slot_of(NodeId node, int servers) {
  switch (role_of(node)) {
    case Role::kServer:
      return rank_of(node);
    case Role::kWorker:
      return servers + rank_of(node);
    default:
      return -1;
  }
}

int aggregator_slots(const Scenario& scenario) {
  return scenario.roles.servers + (scenario.lb.worker_aggregators ? scenario.roles.workers : 0);
}

std::string check_decision(const LbDecision& decision, std::size_t partitions, int slots) {
  if (decision.owner.size() != partitions)
    return "decision " + std::to_string(decision.version) + " lists " +
           std::to_string(decision.owner.size()) + " partition owners, the job has " +
           std::to_string(partitions) + " partitions";
  for (std::size_t i = 0; i < partitions; ++i)
    if (decision.owner[i] < 0 || decision.owner[i] >= slots)
      return "decision " + std::to_string(decision.version) + " gives partition " + std::to_string(i) +
             " to server " + std::to_string(decision.owner[i]) + ", the job has " + std::to_string(slots);
  return "";
}

Payload encode_decision(const LbDecision& decision) {
  ByteWriter w;
  w.u32(decision.version);
  w.u32(decision.iteration);
  w.u32(decision.probe ? 1 : 0);
  w.str(decision.reason);
  w.u32(static_cast<std::uint32_t>(decision.owner.size()));
  for (auto owner : decision.owner) w.i32(owner);
  return w.finish();
}

std::optional<LbDecision> decode_decision(const Payload& payload, std::string& error) {
  ByteReader r(control_bytes(payload));
  LbDecision d;
  std::uint32_t probe = 0, count = 0;
  bool ok = r.u32(d.version, "decision.version") && r.u32(d.iteration, "decision.iteration") &&
            r.u32(probe, "decision.probe") && r.str(d.reason, "decision.reason") &&
            r.count(count, 4, "decision.partitions");
  if (ok && probe > 1) ok = r.fail("decision.probe", std::to_string(probe) + " is neither 0 nor 1");
  if (ok && count > kMaxDecisionPartitions)
    ok = r.fail("decision.partitions",
                std::to_string(count) + " exceeds " + std::to_string(kMaxDecisionPartitions));
  for (std::uint32_t i = 0; ok && i < count; ++i) {
    std::int32_t owner = 0;
    ok = r.i32(owner, "decision.owner");
    if (ok && owner < 0)
      ok = r.fail("decision.owner", "server rank " + std::to_string(owner) + " is negative");
    d.owner.push_back(owner);
  }
  if (!ok || !r.at_end("decision")) {
    error = r.error();
    return std::nullopt;
  }
  d.probe = probe == 1;
  return d;
}

Payload encode_report(const LbReport& report) {
  ByteWriter w;
  w.u32(report.iteration);
  w.u64(report.received_bytes);
  w.f64(report.receive_busy_s);
  w.u32(static_cast<std::uint32_t>(report.peers.size()));
  for (const auto& p : report.peers) {
    w.i32(p.peer);
    w.u64(p.bytes);
    w.f64(p.busy_s);
  }
  return w.finish();
}

std::optional<LbReport> decode_report(const Payload& payload, std::string& error) {
  ByteReader r(control_bytes(payload));
  LbReport report;
  std::uint32_t count = 0;
  bool ok = r.u32(report.iteration, "report.iteration") && r.u64(report.received_bytes, "report.bytes") &&
            r.f64(report.receive_busy_s, "report.busy_s") && r.count(count, 20, "report.peers");
  for (std::uint32_t i = 0; ok && i < count; ++i) {
    PeerUsage p;
    ok = r.i32(p.peer, "report.peer") && r.u64(p.bytes, "report.peer.bytes") &&
         r.f64(p.busy_s, "report.peer.busy_s");
    report.peers.push_back(p);
  }
  // A negative, infinite or NaN busy time would turn into a nonsense bandwidth: refuse it here.
  auto duration = [](double s) { return std::isfinite(s) && s >= 0; };
  if (ok && !duration(report.receive_busy_s))
    ok = r.fail("report.busy_s", std::to_string(report.receive_busy_s) + " is not a duration");
  for (std::size_t i = 0; ok && i < report.peers.size(); ++i)
    if (!duration(report.peers[i].busy_s))
      ok = r.fail("report.peer.busy_s", std::to_string(report.peers[i].busy_s) + " is not a duration");
  if (!ok || !r.at_end("report")) {
    error = r.error();
    return std::nullopt;
  }
  return report;
}

std::vector<std::int32_t> assign_proportional(std::span<const PartitionSpec> partitions,
                                              std::span<const double> weights) {
  std::vector<double> assigned(weights.size(), 0);
  std::vector<std::int32_t> owner;
  owner.reserve(partitions.size());
  for (const auto& p : partitions) {
    std::size_t best = 0;
    double best_finish = 0;
    for (std::size_t s = 0; s < weights.size(); ++s) {
      if (!(weights[s] > 0)) continue;
      const double finish = (assigned[s] + static_cast<double>(p.bytes + kHeaderBytes)) / weights[s];
      if (best_finish == 0 || finish < best_finish) {
        best = s;
        best_finish = finish;
      }
    }
    assigned[best] += static_cast<double>(p.bytes + kHeaderBytes);
    owner.push_back(static_cast<std::int32_t>(best));
  }
  return owner;
}

LbDecision probe_decision(std::span<const PartitionSpec> partitions, int servers, std::uint32_t iteration,
                          std::uint32_t version, std::string reason) {
  LbDecision d;
  d.version = version;
  d.iteration = iteration;
  d.probe = true;
  d.reason = std::move(reason);
  const std::vector<double> equal(static_cast<std::size_t>(servers), 1.0);
  d.owner = assign_proportional(partitions, equal);
  return d;
}

LbDecision worker_probe_decision(std::span<const PartitionSpec> partitions, int servers, int workers,
                                 std::uint32_t iteration, std::uint32_t version, std::string reason) {
  LbDecision d = probe_decision(partitions, workers, iteration, version, std::move(reason));
  for (auto& owner : d.owner) owner += servers;
  return d;
}

AggregatorSplit optimal_split(std::span<const double> server_rates, std::span<const double> worker_rates,
                              double model_bytes, double partition_bytes) {
  const double n = static_cast<double>(worker_rates.size());
  AggregatorSplit split;
  split.shares.assign(server_rates.size() + worker_rates.size(), 0);
  double servers = 0;
  for (double r : server_rates) servers += r;
  std::vector<bool> active(worker_rates.size(), n > 2);
  double time = 0;
  for (bool changed = true; changed;) {
    changed = false;
    double denominator = servers / std::max(n, 1.0), aggregators = 0;
    for (std::size_t w = 0; w < worker_rates.size(); ++w)
      if (active[w]) {
        denominator += worker_rates[w] / (n - 2);
        aggregators += 1;
      }
    const double fill = worker_rates.empty() ? 0 : partition_bytes * static_cast<double>(server_rates.size());
    time = (model_bytes * (1 + aggregators / std::max(n - 2, 1.0)) + fill) / denominator;
    for (std::size_t w = 0; w < worker_rates.size(); ++w)
      if (active[w] && time * worker_rates[w] / model_bytes < 1) {
        active[w] = false;  // its own pushes and pulls alone outlast T: it aggregates nothing
        changed = true;
      }
  }
  for (std::size_t j = 0; j < server_rates.size(); ++j)
    split.shares[j] = time * server_rates[j] / (n * model_bytes) -
                      (worker_rates.empty() ? 0 : partition_bytes / model_bytes);
  for (std::size_t w = 0; w < worker_rates.size(); ++w) {
    if (active[w])
      split.shares[server_rates.size() + w] = (time * worker_rates[w] / model_bytes - 1) / (n - 2);
    // An idle aggregator still pushes and pulls the whole model through its own link.
    time = std::max(time, model_bytes / worker_rates[w]);
  }
  split.time_s = time;
  return split;
}

DecisionBook::DecisionBook(std::span<const PartitionSpec> partitions, int servers, int workers)
    : partitions_(partitions.size()), slots_(servers + workers) {
  decisions_[0] = probe_decision(partitions, servers, 0, 1, "start: no measurement yet");
  // With worker aggregators the second start iteration measures the workers' links.
  decisions_[1] = workers > 0 ? worker_probe_decision(partitions, servers, workers, 1, 2,
                                                      "start: the workers' links are not measured yet")
                              : probe_decision(partitions, servers, 1, 1, "start: no measurement yet");
  static_assert(kDecisionLag == 2);
}

const LbDecision* DecisionBook::accept(const Payload& body, std::string& error) {
  auto decision = decode_decision(body, error);
  if (!decision) return nullptr;
  error = check_decision(*decision, partitions_, slots_);
  if (!error.empty()) return nullptr;
  if (const auto* known = find(decision->iteration); known && !(*known == *decision)) {
    error = "a second, different decision for iteration " + std::to_string(decision->iteration);
    return nullptr;
  }
  auto& slot = decisions_[decision->iteration];
  slot = std::move(*decision);
  return &slot;
}

const LbDecision* DecisionBook::find(std::uint32_t iteration) const {
  const auto it = decisions_.find(iteration);
  return it == decisions_.end() ? nullptr : &it->second;
}

void DecisionBook::forget_before(std::uint32_t iteration) {
  decisions_.erase(decisions_.begin(), decisions_.lower_bound(iteration));
}

void BandwidthMonitor::Span::add(std::uint64_t b, Seconds at) {
  if (bytes == 0) {
    first = at;
    first_bytes = b;
  }
  bytes += b;
  last = at;
}

double BandwidthMonitor::Span::busy_s() const {
  // The first message's transfer ended at `first`: the rest arrived in last - first, so the path
  // was busy for that interval scaled up by all bytes over the later ones.
  if (bytes <= first_bytes || last <= first) return 0;
  return (last - first) * static_cast<double>(bytes) / static_cast<double>(bytes - first_bytes);
}

void BandwidthMonitor::received(std::uint32_t iteration, NodeId peer, std::uint64_t bytes, Seconds at) {
  auto& it = iterations_[iteration];
  it.total.add(bytes, at);
  it.peers[peer].add(bytes, at);
}

LbReport BandwidthMonitor::take(std::uint32_t iteration) {
  LbReport report;
  report.iteration = iteration;
  auto node = iterations_.extract(iteration);
  if (node.empty()) return report;
  const auto& it = node.mapped();
  report.received_bytes = it.total.bytes;
  report.receive_busy_s = it.total.busy_s();
  for (const auto& [peer, span] : it.peers) report.peers.push_back({peer, span.bytes, span.busy_s()});
  return report;
}

}  // namespace pstwin
