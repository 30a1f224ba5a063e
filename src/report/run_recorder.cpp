#include "report/run_recorder.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <sstream>

#include "core/codec.hpp"
#include "core/digest.hpp"
#include "ps/host_groups.hpp"
#include "ps/ids.hpp"

namespace pstwin {
namespace {
std::string value_digest(std::uint64_t key, const Payload& value) {
  Digest digest;
  digest.update_u64(key);
  digest.update_u64(value.size());
  if (!value.is_phantom()) digest.update(value.bytes());
  return digest.hex();
}

// Colocated roles share a NIC and loopback traffic skips it: the closed forms assume neither, nor
// anything but a sync star. With ps.local_reduce only each host's root crosses its NIC, so the
// workers it pushes for may share its host.
bool closed_form_applies(const Scenario& sc) {
  if (sc.cluster.topology != Topology::kStar || sc.ps.mode != TrainingMode::kSync) return false;
  std::vector<std::string> hosts;
  for (int s = 0; s < sc.roles.servers; ++s) hosts.push_back(sc.server_host_name(s));
  const HostGroups groups(sc);
  for (const int w : groups.roots()) hosts.push_back(sc.worker_host_name(w));
  std::sort(hosts.begin(), hosts.end());
  return std::adjacent_find(hosts.begin(), hosts.end()) == hosts.end();
}

double model_wire_bytes(const SyntheticWorkload& workload) {
  double wire = 0;
  for (const auto& p : workload.partitions()) wire += static_cast<double>(p.bytes + kHeaderBytes);
  return wire;
}
}  // namespace

RunRecorder::RunRecorder(const Scenario& scenario, const SyntheticWorkload& workload)
    : scenario_(scenario), workload_(workload) {}

void RunRecorder::node_table(const std::vector<NodeInfo>& table, Seconds) {
  nodes_ = table;
}

void RunRecorder::pull_received(int worker, std::uint64_t key, std::uint32_t iteration,
                                const Payload& value) {
  // Sync: every worker holds the same final aggregates; worker 0's stand for the model.
  if (scenario_.ps.mode == TrainingMode::kSync && worker == 0 &&
      static_cast<int>(iteration) == workload_.iterations() - 1)
    final_digest_[key] = value_digest(key, value);
}

void RunRecorder::final_store(NodeId, std::uint64_t key, const Payload& store) {
  final_digest_[key] = value_digest(key, store);
}

void RunRecorder::iteration_done(int, std::uint32_t iteration, Seconds start, Seconds end) {
  auto& slowest = slowest_[iteration];
  slowest = std::max(slowest, end - start);
}

void RunRecorder::lb_decision(NodeId node, const LbDecision& decision) {
  if (node != kSchedulerId) return;  // every node reports the decisions it takes up: keep the maker's
  if (!balancing_) balancing_.emplace();
  balancing_->decisions.push_back(
      {decision.iteration, decision.version, decision.probe, decision.reason,
       decision.bytes_per_server(workload_.partitions(), aggregator_slots(scenario_))});
}

void RunRecorder::lb_report(NodeId from, const LbReport& report) {
  if (role_of(from) != Role::kServer) return;
  if (!balancing_) balancing_.emplace();
  const int rank = rank_of(from);
  const double nominal = scenario_.host_link(scenario_.server_host_name(rank)).bandwidth_Bps;
  const double rate = report.receive_rate_Bps();
  balancing_->measured.push_back({report.iteration, rank, rate, nominal > 0 ? rate / nominal : 0});
}

void RunRecorder::fill(RunReport& report) const {
  if (scenario_.ps.backup_workers > 0) report.late_pushes = late_pushes_;
  report.iterations.clear();
  for (const auto& [iteration, seconds] : slowest_)
    report.iterations.push_back({static_cast<int>(iteration), seconds});
  if (balancing_) {
    report.balancing = balancing_;
    auto& b = *report.balancing;
    double sum = 0;
    b.balanced_iterations = 0;
    for (const auto& d : b.decisions)
      if (auto it = slowest_.find(d.iteration); !d.probe && it != slowest_.end()) {
        sum += it->second;
        ++b.balanced_iterations;
      }
    b.balanced_mean_s = b.balanced_iterations > 0 ? sum / b.balanced_iterations : 0;
  }
  report.nodes = nodes_;
  Digest digest;
  for (const auto& [key, hex] : final_digest_) {
    digest.update_u64(key);
    digest.update(std::as_bytes(std::span(hex.data(), hex.size())));
  }
  report.model_digest = final_digest_.empty() ? "" : digest.hex();
}

std::optional<Bound> analytic_bound(const Scenario& sc, const SyntheticWorkload& workload,
                                    double bandwidth_factor, double latency_factor, double cross_traffic) {
  if (!closed_form_applies(sc)) return std::nullopt;

  const HostGroups groups(sc);
  const double n = groups.pushers();  // workers, or with ps.local_reduce the hosts' roots
  double bound = 0;
  double min_latency = std::numeric_limits<double>::infinity();
  std::ostringstream why;
  // Server j must receive n*M_j bytes and send them back; it can send nothing until one whole
  // partition has arrived from every worker (n*p_j bytes, p_j its smallest partition). Each
  // direction also carries the model's cross traffic (ACKs) of the other: a share c of n*M_j.
  for (int s = 0; s < sc.roles.servers; ++s) {
    double m = 0;
    double smallest = 0;
    for (const auto& p : workload.partitions())
      if (p.server_rank == s) {
        const double wire = static_cast<double>(p.bytes + kHeaderBytes);
        m += wire;
        smallest = smallest == 0 ? wire : std::min(smallest, wire);
      }
    const LinkSpec link = sc.host_link(sc.server_host_name(s));
    const double b = bandwidth_factor * link.bandwidth_Bps;
    // The cross traffic of the first n*p_j bytes falls inside the wait, not after it.
    bound = std::max(bound, n * smallest / b + n * (m * (1 + cross_traffic) - cross_traffic * smallest) / b);
    min_latency = std::min(min_latency, link.latency_s);
  }
  // Each worker sends and receives the whole model through its own link.
  const double model_wire = model_wire_bytes(workload);
  for (const int w : groups.roots()) {
    const LinkSpec link = sc.host_link(sc.worker_host_name(w));
    bound = std::max(bound, model_wire * (1 + cross_traffic) / (bandwidth_factor * link.bandwidth_Bps));
    min_latency = std::min(min_latency, link.latency_s);
  }
  // A shared switch carries every push and pull (2*n*M), each with its cross traffic.
  const double switch_Bps = sc.cluster.switch_bandwidth_Bps;
  if (switch_Bps > 0)
    bound = std::max(bound, 2 * n * model_wire * (1 + cross_traffic) / (bandwidth_factor * switch_Bps));
  // A push and its pull each cross two links: pay that latency at least once per iteration.
  const double latency = 2 * 2 * latency_factor * min_latency;
  // ps.local_reduce with k workers on a host: its root reads k-1 partitions before a push can leave
  // and writes the aggregate, which each worker then reads, after the last pull (host_reduce.hpp);
  // over the iteration the root's reduce lane copies k times the model. Payload bytes, at I.
  std::size_t k = 1;
  for (const int root : groups.roots()) k = std::max(k, groups.members(root).size());
  double host_copies = 0;
  if (k > 1) {
    double payload = 0;
    double smallest = 0;
    for (const auto& p : workload.partitions()) {
      payload += static_cast<double>(p.bytes);
      smallest =
          smallest == 0 ? static_cast<double>(p.bytes) : std::min(smallest, static_cast<double>(p.bytes));
    }
    const double intra_Bps = sc.cluster.intra_host_bandwidth_Bps;
    if (sc.ps.local_reduce == LocalReduce::kNccl) {
      // "nccl" (device_reduce.hpp): before a push can leave, the host's reduce of a partition (q/I, a
      // ring moves it once over each GPU's link) and the root's device -> host copy (q/X); after the
      // last pull, its host -> device copy and the broadcast. Over the iteration the collective lane
      // carries 2P/I, and the root's copy lane 2P/X between a first reduce and a last broadcast.
      const double pcie_Bps = sc.cluster.pcie_bandwidth_Bps;
      const double fill = 2 * smallest / intra_Bps + 2 * smallest / pcie_Bps;
      const double lanes =
          std::max(2 * payload / intra_Bps, 2 * payload / pcie_Bps + 2 * smallest / intra_Bps);
      bound = std::max(bound + fill, lanes);
      host_copies = fill;
    } else {
      const double fill = static_cast<double>(k + 1) * smallest / intra_Bps;
      bound = std::max(bound + fill, static_cast<double>(k) * payload / intra_Bps + smallest / intra_Bps);
      host_copies = fill;
    }
  }
  Bound result;
  result.time_s = sc.workload.compute_s + bound + latency;
  const bool nccl = k > 1 && sc.ps.local_reduce == LocalReduce::kNccl;
  why << "compute + max(max_j n*(p_j + (1+c)*M_j - c*p_j)/(f*B_j), max_w (1+c)*M/(f*B_w)"
      << (switch_Bps > 0 ? ", 2*n*(1+c)*M/(f*S)" : "") << ")"
      << (nccl    ? " + 2*q/I + 2*q/X (or max(2*P/I, 2*P/X + 2*q/I) if more)"
          : k > 1 ? " + (k+1)*q/I (or k*P/I + q/I if more)"
                  : "")
      << " + 4*lf*L; n=" << groups.pushers();
  if (nccl)
    why << " pushing hosts (ps.local_reduce = nccl), k=" << k
        << " GPUs per host, P = model payload bytes, q its smallest partition, I = "
        << sc.cluster.intra_host_bandwidth_Bps
        << " B/s (reduce and broadcast between the GPUs), X = " << sc.cluster.pcie_bandwidth_Bps
        << " B/s (the root's PCIe copies), 2*q/I + 2*q/X = " << host_copies << " s";
  else if (k > 1)
    why << " pushing hosts (ps.local_reduce), k=" << k
        << " workers per host, P = model payload bytes, q its smallest partition, I = "
        << sc.cluster.intra_host_bandwidth_Bps << " B/s (intra-host), (k+1)*q/I = " << host_copies << " s";
  else
    why << " workers";
  why << ", M_j = wire bytes hashed to server j, p_j its smallest partition, M = " << model_wire
      << " wire bytes, f = " << bandwidth_factor << " (bandwidth factor), lf = " << latency_factor
      << " (latency factor), c = " << cross_traffic << " (cross traffic), L = " << min_latency
      << " s (smallest host latency)";
  if (switch_Bps > 0) why << ", S = " << switch_Bps << " B/s (switch)";
  result.formula = why.str();
  return result;
}

std::optional<Bound> balanced_bound(const Scenario& sc, const SyntheticWorkload& workload,
                                    double bandwidth_factor, double latency_factor, double cross_traffic) {
  if (!closed_form_applies(sc)) return std::nullopt;
  const double n = sc.roles.workers, f = bandwidth_factor, c = cross_traffic;
  const double model = model_wire_bytes(workload);
  // Whatever the split, the last key a worker pushes and the first key a server answers are whole
  // partitions: q, the smallest one's wire bytes, is what the round structure costs at least.
  double smallest = 0;
  for (const auto& p : workload.partitions()) {
    const auto wire = static_cast<double>(p.bytes + kHeaderBytes);
    smallest = smallest == 0 ? wire : std::min(smallest, wire);
  }
  std::vector<double> server_bandwidths;
  double min_latency = std::numeric_limits<double>::infinity();
  for (int s = 0; s < sc.roles.servers; ++s) {
    const LinkSpec link = sc.host_link(sc.server_host_name(s));
    server_bandwidths.push_back(link.bandwidth_Bps);
    min_latency = std::min(min_latency, link.latency_s);
  }
  // A worker's last push leaves once its uplink carried the model and the ACKs of what it pulled by
  // then (at most M - q); the last key's aggregate (at least q) comes down after it.
  double worker_term = 0;
  for (int w = 0; w < sc.roles.workers; ++w) {
    const LinkSpec link = sc.host_link(sc.worker_host_name(w));
    worker_term = std::max(worker_term, ((1 + c) * model + (1 - c) * smallest) / (f * link.bandwidth_Bps));
    min_latency = std::min(min_latency, link.latency_s);
  }
  // A server with a share answers nothing before one key is in from every worker (n q), then sends
  // n times its share: n ((1+c) M_j + (1-c) q) / (f B_j). Its max over the k servers with a share is at
  // least their bandwidth-weighted mean, n ((1+c) M + k (1-c) q) / (f sum B), smallest over the k
  // fastest; every k is tried, as a slow server may cost more wait than it adds bandwidth.
  std::ranges::sort(server_bandwidths, std::greater<>());
  double server_term = server_bandwidths.empty() ? 0 : std::numeric_limits<double>::infinity();
  double fastest_sum = 0;
  for (std::size_t k = 1; k <= server_bandwidths.size(); ++k) {
    fastest_sum += server_bandwidths[k - 1];
    server_term = std::min(
        server_term, n * ((1 + c) * model + static_cast<double>(k) * (1 - c) * smallest) / (f * fastest_sum));
  }
  const double servers_bandwidth = fastest_sum;
  if (sc.lb.worker_aggregators) {
    // Every server and worker link at once (optimal_split, docs/FPT.md); it covers the workers' links.
    std::vector<double> servers, workers;
    for (int s = 0; s < sc.roles.servers; ++s)
      servers.push_back(f * sc.host_link(sc.server_host_name(s)).bandwidth_Bps / (1 + c));
    for (int w = 0; w < sc.roles.workers; ++w)
      workers.push_back(f * sc.host_link(sc.worker_host_name(w)).bandwidth_Bps / (1 + c));
    server_term = optimal_split(servers, workers, model).time_s;
    worker_term = 0;
  }
  // A shared switch (cluster.switch_bandwidth) carries every push and pull whatever the split.
  const double switch_Bps = sc.cluster.switch_bandwidth_Bps;
  // With worker aggregators a worker's share of its own range stays on its host: at least n-1 of n.
  const double crossing = sc.lb.worker_aggregators ? n - 1 : n;
  const double switch_term = switch_Bps > 0 ? 2 * crossing * (1 + c) * model / (f * switch_Bps) : 0;
  // Push and aggregate each cross two NICs: 2 lf L each way. The ACKs of pushes still in flight may
  // use the down link while the last aggregate's latency runs, for at most c of it: (4 - 2c) lf L.
  const double latency = (4 - 2 * c) * latency_factor * min_latency;
  Bound result;
  result.time_s = sc.workload.compute_s + std::max({worker_term, server_term, switch_term}) + latency;
  std::ostringstream why;
  if (sc.lb.worker_aggregators)
    why << "compute + max(M*(1 + W/(n-2)) / (sum_j b_j/n + sum_w b_w/(n-2))"
        << (switch_Bps > 0 ? ", 2*(n-1)*(1+c)*M/(f*S)" : "")
        << ") + (4-2c)*lf*L with b = f*B/(1+c) (the best split over servers and W worker aggregators: every "
           "link busy for the same time; a worker whose share would be negative aggregates nothing); n=";
  else
    why << "compute + max(max_w ((1+c)*M + (1-c)*q)/(f*B_w), min_k n*((1+c)*M + k*(1-c)*q)/(f*sum of the k "
           "fastest B_j)"
        << (switch_Bps > 0 ? ", 2*n*(1+c)*M/(f*S)" : "")
        << ") + (4-2c)*lf*L (the best split of the model over the servers; the last key pushed and the first "
           "key answered are whole partitions); n=";
  // The symbols' values, for both forms (the aggregator one used to end at "n=").
  why << sc.roles.workers << " workers, M = " << model << " wire bytes, q = " << smallest
      << " wire bytes (smallest partition), sum_j B_j = " << servers_bandwidth << " B/s, f = " << f
      << ", lf = " << latency_factor << ", c = " << c << ", L = " << min_latency << " s";
  result.formula = why.str();
  return result;
}

}  // namespace pstwin
