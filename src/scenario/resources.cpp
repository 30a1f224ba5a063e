#include "scenario/resources.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string_view>

namespace pstwin {
namespace {

// Rough per-object costs: an order of magnitude is all a refusal of what is orders of magnitude too
// large needs (docs/SECURITY.md compares the estimate with measured runs).
constexpr double kNodeStateBytes = 64 * 1024;
constexpr double kTouchedStackBytes = 64 * 1024;  // a deeper stack is mapped but not touched
constexpr double kActorBytes = 2 * 1024;
constexpr double kHostBytes = 16 * 1024;      // a SimGrid host, its NIC, loopback and route
constexpr double kPartitionStateBytes = 256;  // per partition and node: rounds, lanes, parked pulls
constexpr double kTraceEventBytes = 1700;     // a span, and its part of the JSON document written
constexpr double kTraceEventsPerMessage = 3;  // send, receive, and the executor spans around them
constexpr double kDatasetBytes = 250e6;       // Fashion-MNIST as float32, train and test
constexpr double kMessagesPerPartition = 4;   // push, its acknowledgement, pull, its reply

std::string count_text(double value) {
  std::array<char, 32> buf{};
  if (value < 1e15)
    std::snprintf(buf.data(), buf.size(), "%.0f", value);
  else
    std::snprintf(buf.data(), buf.size(), "%.3g", value);
  return buf.data();
}

// The model: its bytes, its partitions, and the field that declares it, computed without building
// the tensor list (a split of a huge model_bytes into 2^31 tensors must not allocate it).
struct ModelShape {
  double bytes = 0;
  double partitions = 0;
  std::string field;
};

double partitions_of(double tensor_bytes, double partition_bytes) {
  return std::max(1.0, std::ceil(tensor_bytes / partition_bytes));
}

ModelShape model_shape(const Scenario& sc) {
  ModelShape shape;
  const double pb = static_cast<double>(std::max<std::uint64_t>(sc.ps.partition_bytes, 4));
  if (sc.workload.kind == WorkloadKind::kMlp) {
    shape.field = "train.layers";
    const auto& layers = sc.train.layers;
    for (std::size_t l = 1; l < layers.size(); ++l) {
      const double out = static_cast<double>(layers[l]);
      const double weights = 4 * out * static_cast<double>(layers[l - 1]);
      shape.bytes += weights + 4 * out;
      shape.partitions += partitions_of(weights, pb) + partitions_of(4 * out, pb);
    }
    return shape;
  }
  const auto& w = sc.workload;
  if (w.tensor_bytes.empty() && w.model_bytes > 0 && w.tensors > 0) {
    shape.field = "workload.model_bytes";
    const double count = w.tensors;
    const double words = std::floor(static_cast<double>(w.model_bytes) / 4);
    const double small = 4 * std::floor(words / count);
    const double big_count = std::fmod(words, count);
    shape.bytes = 4 * words;
    shape.partitions =
        big_count * partitions_of(small + 4, pb) + (count - big_count) * partitions_of(small, pb);
    return shape;
  }
  shape.field = "workload.tensor_bytes";
  for (const auto bytes : sc.declared_tensor_bytes()) {
    shape.bytes += static_cast<double>(bytes);
    shape.partitions += partitions_of(static_cast<double>(bytes), pb);
  }
  return shape;
}

// The role whose count is largest: the field to lower when there are too many nodes.
std::string largest_role(const Scenario& sc) {
  const auto& r = sc.roles;
  if (r.workers >= r.servers && r.workers >= r.validators) return "roles.workers";
  return r.servers >= r.validators ? "roles.servers" : "roles.validators";
}

}  // namespace

std::string approximate_bytes(double bytes) {
  static constexpr std::array<std::string_view, 7> kUnits{"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  std::size_t unit = 0;
  while (bytes >= 1000 && unit + 1 < kUnits.size()) {
    bytes /= 1000;
    ++unit;
  }
  std::array<char, 48> buf{};
  std::snprintf(buf.data(), buf.size(), bytes < 10 ? "%.1f %s" : "%.0f %s", bytes, kUnits[unit].data());
  return buf.data();
}

ResourceEstimate estimate_resources(const Scenario& sc) {
  ResourceEstimate out;
  const double workers = sc.roles.workers, servers = sc.roles.servers, validators = sc.roles.validators;
  const double nodes = 1 + servers + workers + validators;
  const bool mlp = sc.workload.kind == WorkloadKind::kMlp;

  // Nodes and their actors: an event loop each, a worker's compute, copy and push lanes, a server's
  // engine lanes, and with SimGrid's own network model one actor per stream.
  const double stack_kb = mlp ? std::max(sc.sim.stack_size_kb, 1024) : sc.sim.stack_size_kb;
  double actors = nodes + 3 * workers + 2 * validators;
  if (sc.sim.network_model == "simgrid") actors += 2 * (workers + validators) * servers + 2 * nodes;
  const double per_actor = std::min(stack_kb * 1024, kTouchedStackBytes) + kActorBytes;
  out.memory.push_back({largest_role(sc), nodes * kNodeStateBytes + actors * per_actor,
                        count_text(nodes) + " nodes, " + count_text(actors) + " simulated actors"});
  const double engine_lanes = servers * sc.ps.server_engine_threads;
  out.memory.push_back({sc.ps.server_engine_threads > servers ? "ps.server_engine_threads" : "roles.servers",
                        engine_lanes * per_actor, count_text(engine_lanes) + " server engine lanes"});
  if (sc.cluster.hosts > 0)
    out.memory.push_back({"cluster.hosts", sc.cluster.hosts * kHostBytes,
                          count_text(sc.cluster.hosts) + " simulated hosts and their links"});
  if (sc.cluster.topology == Topology::kTwoTier)
    out.memory.push_back({"cluster.racks", sc.cluster.racks * kHostBytes,
                          count_text(sc.cluster.racks) + " racks and their uplinks"});

  const ModelShape model = model_shape(sc);
  if (sc.workload.payload == PayloadMode::kReal) {
    // A worker's staging buffer, its pulled copy and a push in flight; the servers' sums and
    // aggregates; a robust rule keeps every worker's candidate.
    double copies = 3 * (workers + validators) + 3;
    if (sc.zeno.rule != "mean") copies += workers;
    // Whichever factor is further beyond what a real job has (a GB model, hundreds of workers).
    const bool many = copies > 300 && copies / 300 > model.bytes / 1e9;
    const std::string field = many ? largest_role(sc) : model.field;
    out.memory.push_back({field, model.bytes * copies,
                          "a " + approximate_bytes(model.bytes) + " model held " + count_text(copies) +
                              " times (3 per worker, 3 on the servers)"});
  }
  out.memory.push_back({model.field, model.partitions * nodes * kPartitionStateBytes,
                        count_text(model.partitions) + " partitions (of ps.partition_bytes = " +
                            count_text(static_cast<double>(sc.ps.partition_bytes)) + ") on " +
                            count_text(nodes) + " nodes"});
  if (mlp) out.memory.push_back({"workload.kind", kDatasetBytes, "the Fashion-MNIST data set"});

  const double iterations = sc.workload.iterations;
  out.messages = iterations * (workers + validators) * model.partitions * kMessagesPerPartition;
  if (sc.output.trace)
    out.memory.push_back(
        {"output.trace_max_events",
         std::min(static_cast<double>(sc.output.trace_max_events), kTraceEventsPerMessage * out.messages) *
             kTraceEventBytes,
         "trace events"});
  std::ranges::stable_sort(out.memory, [](const auto& a, const auto& b) { return a.amount > b.amount; });
  for (const auto& term : out.memory) out.memory_bytes += term.amount;

  std::string field = "workload.iterations";
  if (workers + validators > iterations && workers + validators >= model.partitions)
    field = largest_role(sc);
  else if (model.partitions > iterations)
    field = model.field;
  out.messages_term = {field, out.messages,
                       "workload.iterations = " + count_text(iterations) + " x " +
                           count_text(workers + validators) + " workers x " + count_text(model.partitions) +
                           " partitions x " + count_text(kMessagesPerPartition)};
  return out;
}

namespace {

double read_machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  double bytes = pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : 0;
  // A container's limit (cgroup v2), when it is set and lower.
  std::ifstream limit("/sys/fs/cgroup/memory.max");
  double cgroup = 0;
  if (limit >> cgroup && cgroup > 0 && (bytes == 0 || cgroup < bytes)) bytes = cgroup;
  return bytes > 0 ? bytes : 16e9;
}

}  // namespace

double machine_memory_bytes() {
  static const double bytes = read_machine_memory_bytes();  // read once: every scenario load asks
  return bytes;
}

std::optional<ResourceProblem> check_resources(const Scenario& sc, const ResourceLimits& limits) {
  if (sc.sim.stack_size_kb > limits.max_stack_size_kb)
    return ResourceProblem{"sim.stack_size_kb",
                           "at most " + std::to_string(limits.max_stack_size_kb) +
                               " (1 GiB per simulated actor); the default 128 is enough but for deep "
                               "recursion"};
  const ResourceEstimate estimate = estimate_resources(sc);
  const double memory = limits.memory_bytes > 0 ? limits.memory_bytes : machine_memory_bytes();
  if (estimate.memory_bytes > memory) {
    const ResourceTerm& top = estimate.memory.front();
    return ResourceProblem{top.field, "a run would need about " + approximate_bytes(estimate.memory_bytes) +
                                          " of memory, more than this machine's " +
                                          approximate_bytes(memory) + "; most of it (" +
                                          approximate_bytes(top.amount) + ") for " + top.detail + ": lower " +
                                          top.field};
  }
  if (estimate.messages > limits.messages)
    return ResourceProblem{estimate.messages_term.field,
                           "a run would simulate about " + count_text(estimate.messages) + " messages (" +
                               estimate.messages_term.detail + "), more than the " +
                               count_text(limits.messages) + " a run may have (hours of simulation): lower " +
                               estimate.messages_term.field};
  return std::nullopt;
}

}  // namespace pstwin
