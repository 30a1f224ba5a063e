#include "ps/host_reduce.hpp"

#include <algorithm>
#include <sstream>

#include "core/assert.hpp"
#include "ps/ids.hpp"

namespace pstwin {

HostReduce::HostReduce(Runtime& runtime, HostReduceOptions options, const SyntheticWorkload& workload,
                       const HostGroups& groups, int rank, Executor& copy_stage, Executor& reduce_stage,
                       Hooks hooks)
    : rt_(runtime),
      options_(std::move(options)),
      workload_(workload),
      groups_(groups),
      rank_(rank),
      root_(groups.root_of(rank)),
      copy_stage_(copy_stage),
      reduce_stage_(reduce_stage),
      hooks_(std::move(hooks)),
      round_(workload, groups, rank, options_.workers, options_.iterations) {
  PSTWIN_ASSERT(groups.members(root_).size() > 1, "a host reduce for a worker alone on its host");
}

std::string HostReduce::input_name(int rank, std::uint64_t key) const {
  return "pstwin_" + options_.staging_job + "_hostreduce_in_" + std::to_string(rank) + "_" +
         std::to_string(key);
}

std::string HostReduce::aggregate_name(std::uint64_t key) const {
  return "pstwin_" + options_.staging_job + "_hostreduce_out_" + std::to_string(root_) + "_" +
         std::to_string(key);
}

std::shared_ptr<ByteBuffer> HostReduce::buffer(const std::string& name, std::uint64_t bytes) {
  auto& region = buffers_[name];
  if (!region) region = rt_.staging().open(name, bytes);
  return region;
}

Seconds HostReduce::intra_host_seconds(std::uint64_t bytes) const {
  return static_cast<double>(bytes) / options_.intra_host_bandwidth_Bps;
}

void HostReduce::ignore(const Message& message, const std::string& why) {
  rt_.log("worker " + std::to_string(rank_) + ": ignoring local_reduce " +
          (message.header.is_response ? "response" : "request") + " from node " +
          std::to_string(message.header.sender) + " (key " + std::to_string(message.header.key) +
          ", iteration " + std::to_string(message.header.iteration) + "): " + why);
}

void HostReduce::stage(const PartitionSpec& partition, std::uint32_t iteration) {
  const std::string name = input_name(rank_, partition.key);
  auto region = options_.phantom ? nullptr : buffer(name, partition.bytes);
  const PartitionSpec* spec = &partition;
  auto copy_in = [this, region, spec, iteration] {
    if (region) hooks_.fill(*spec, iteration, region->floats());
  };
  auto staged = [this, spec, iteration] {
    if (is_root()) {
      if (round_.own_staged(*spec, iteration)) reduce(*spec, iteration);
      return;
    }
    awaiting_[spec->key] = iteration;
    Message ready;
    ready.header.recipient = worker_id(root_);
    ready.header.command = Command::kLocalReduce;
    ready.header.key = spec->key;
    ready.header.iteration = iteration;
    rt_.send(std::move(ready));
  };
  const ComputeCost cost{static_cast<double>(partition.bytes) / options_.copy_bandwidth_Bps, 0};
  copy_stage_.submit_tagged(0, "copy", cost, std::move(copy_in), std::move(staged),
                            SpanTags{partition.key, iteration, rank_, name, partition.bytes});
}

void HostReduce::on_message(const Message& message) {
  if (const auto why = round_.stranger(message); !why.empty()) {
    ignore(message, why);
    return;
  }
  if (message.header.is_response)
    on_aggregate(message);
  else
    on_ready(message);
}

void HostReduce::on_ready(const Message& request) {
  const auto ready = round_.ready(request, iteration_);
  if (!ready.ignored.empty()) {
    ignore(request, ready.ignored);
    return;
  }
  if (ready.complete) reduce(*ready.complete, request.header.iteration);
}

void HostReduce::reduce(const PartitionSpec& partition, std::uint32_t iteration) {
  const auto members = groups_.members(root_);
  const std::string name = input_name(rank_, partition.key);
  std::shared_ptr<ByteBuffer> sum;
  std::vector<std::shared_ptr<ByteBuffer>> inputs;  // the others' partitions, by rank
  if (!options_.phantom) {
    sum = buffer(name, partition.bytes);
    for (const int member : members.subspan(1))
      inputs.push_back(buffer(input_name(member, partition.key), partition.bytes));
  }
  // By rank, so the sum (and the model digest) is the same on every run and in both backends.
  auto add = [sum, inputs] {
    if (!sum) return;
    const auto out = sum->floats();
    for (const auto& input : inputs) {
      const auto in = std::span<const float>(input->floats());
      for (std::size_t j = 0; j < out.size(); ++j) out[j] += in[j];
    }
  };
  const PartitionSpec* spec = &partition;
  auto push = [this, spec, sum, name] {
    hooks_.push(*spec, sum ? Payload::live_view(sum) : Payload::phantom(spec->bytes), name);
  };
  const auto others = static_cast<double>(members.size() - 1);
  reduce_stage_.submit_tagged(
      0, "host reduce", ComputeCost{.device_seconds = others * intra_host_seconds(partition.bytes)},
      std::move(add), std::move(push), SpanTags{partition.key, iteration, rank_, name, partition.bytes});
}

bool HostReduce::share(const Message& aggregate) {
  PSTWIN_ASSERT(is_root(), "only a host's root shares the aggregate");
  const auto key = aggregate.header.key;
  const auto iteration = aggregate.header.iteration;
  const auto bytes = aggregate.payload.size();
  std::string error;
  if (!round_.aggregate_partition(aggregate, error)) {
    rt_.fail(error);
    return false;
  }
  std::shared_ptr<ByteBuffer> out;
  if (!aggregate.payload.is_phantom()) out = buffer(aggregate_name(key), bytes);
  auto write = [out, payload = aggregate.payload] {
    if (out) std::ranges::copy(payload.bytes(), out->bytes().begin());
  };
  auto notify = [this, key, iteration] {
    for (const int member : groups_.members(root_).subspan(1)) {
      Message done;
      done.header.recipient = worker_id(member);
      done.header.command = Command::kLocalReduce;
      done.header.is_response = true;
      done.header.key = key;
      done.header.iteration = iteration;
      rt_.send(std::move(done));
    }
  };
  reduce_stage_.submit_tagged(0, "host broadcast", ComputeCost{.device_seconds = intra_host_seconds(bytes)},
                              std::move(write), std::move(notify),
                              SpanTags{key, iteration, rank_, aggregate_name(key), bytes});
  return true;
}

void HostReduce::on_aggregate(const Message& response) {
  if (rank_of(response.header.sender) != root_) {
    ignore(response, "only the host's root (worker " + std::to_string(root_) + ") shares aggregates");
    return;
  }
  const auto key = response.header.key;
  const auto it = awaiting_.find(key);
  if (it == awaiting_.end() || it->second != response.header.iteration) {
    ignore(response, "no partition of that key and iteration awaits its aggregate");
    return;
  }
  awaiting_.erase(it);
  const PartitionSpec* partition = round_.find_partition(key);
  PSTWIN_ASSERT(partition != nullptr, "a staged partition without a spec");
  auto in = options_.phantom ? nullptr : buffer(aggregate_name(key), partition->bytes);
  auto value = std::make_shared<Payload>();
  auto read = [in, value, bytes = partition->bytes] {
    *value = in ? Payload::copy_of(in->bytes()) : Payload::phantom(bytes);
  };
  auto deliver = [this, header = response.header, value] {
    Message pulled{header, std::move(*value)};
    pulled.header.command = Command::kPull;
    hooks_.deliver(std::move(pulled));
  };
  copy_stage_.submit_tagged(
      0, "host receive", ComputeCost{.device_seconds = intra_host_seconds(partition->bytes)}, std::move(read),
      std::move(deliver),
      SpanTags{key, response.header.iteration, rank_, aggregate_name(key), partition->bytes});
}

std::string HostReduce::describe() const {
  std::ostringstream out;
  out << "host reduce (root worker " << root_ << "): ";
  if (is_root())
    out << round_.waiting() << " partitions waiting for the host's workers";
  else
    out << awaiting_.size() << " partitions waiting for the host's aggregate";
  return out.str();
}

}  // namespace pstwin
