#include "ps/device_reduce.hpp"

#include <algorithm>
#include <sstream>

#include "core/assert.hpp"
#include "ps/ids.hpp"

namespace pstwin {
namespace {

int member_index(const HostGroups& groups, int rank) {
  const auto members = groups.members(groups.root_of(rank));
  return static_cast<int>(std::ranges::find(members, rank) - members.begin());
}

std::string op_name(DeviceReduceOp op) {
  switch (op) {
    case DeviceReduceOp::kReady:
      return "ready";
    case DeviceReduceOp::kGroupId:
      return "group id";
    case DeviceReduceOp::kReduce:
      return "reduce";
    case DeviceReduceOp::kBroadcast:
      return "broadcast";
  }
  return "unknown";
}

}  // namespace

DeviceReduce::DeviceReduce(Runtime& runtime, HostReduceOptions options, const SyntheticWorkload& workload,
                           const HostGroups& groups, int rank, DeviceTensors& device, Executor& copy_stage,
                           Executor& collective_stage, Hooks hooks)
    : rt_(runtime),
      options_(std::move(options)),
      workload_(workload),
      groups_(groups),
      rank_(rank),
      root_(groups.root_of(rank)),
      member_(member_index(groups, rank)),
      device_(device),
      copy_stage_(copy_stage),
      collective_stage_(collective_stage),
      hooks_(std::move(hooks)),
      round_(workload, groups, rank, options_.workers, options_.iterations) {
  PSTWIN_ASSERT(groups.members(root_).size() > 1, "a device reduce for a worker alone on its host");
}

Seconds DeviceReduce::intra_host_seconds(std::uint64_t bytes) const {
  return static_cast<double>(bytes) / options_.intra_host_bandwidth_Bps;
}

Seconds DeviceReduce::pcie_seconds(std::uint64_t bytes) const {
  return static_cast<double>(bytes) / options_.pcie_bandwidth_Bps;
}

std::string DeviceReduce::sum_name(std::uint64_t key) const {
  return "pstwin_" + options_.staging_job + "_devicereduce_" + std::to_string(rank_) + "_" +
         std::to_string(key);
}

void DeviceReduce::ignore(const Message& message, const std::string& why) {
  const auto op = static_cast<DeviceReduceOp>(message.header.partition);
  rt_.log("worker " + std::to_string(rank_) + ": ignoring local_reduce " +
          (message.header.is_response ? "response" : "request") + " (" + op_name(op) + ") from node " +
          std::to_string(message.header.sender) + " (key " + std::to_string(message.header.key) +
          ", iteration " + std::to_string(message.header.iteration) + "): " + why);
}

void DeviceReduce::submit(Executor& stage, std::string_view label, Seconds device_seconds,
                          std::function<void()> work, std::function<void()> done, SpanTags tags) {
  submit_device_work(rt_, stage, label, ComputeCost{.device_seconds = device_seconds}, std::move(work),
                     std::move(done), "worker " + std::to_string(rank_) + " (" + device_.describe() + ")",
                     std::move(tags));
}

void DeviceReduce::tell_members(DeviceReduceOp op, std::uint64_t key, std::uint32_t iteration,
                                Payload payload) {
  for (const int member : groups_.members(root_).subspan(1)) {
    Message message{{}, payload};
    message.header.recipient = worker_id(member);
    message.header.command = Command::kLocalReduce;
    message.header.is_response = true;
    message.header.partition = static_cast<std::uint32_t>(op);
    message.header.key = key;
    message.header.iteration = iteration;
    rt_.send(std::move(message));
  }
}

void DeviceReduce::start() {
  if (!is_root() || joining_) return;
  joining_ = true;
  auto id = std::make_shared<std::vector<std::byte>>();
  // ncclGetUniqueId opens the group's bootstrap socket: device work, on the lane like the rest.
  submit(
      collective_stage_, "group id", 0, [this, id] { *id = device_.new_group_id(); },
      [this, id] {
        tell_members(DeviceReduceOp::kGroupId, 0, 0, Payload::copy_of(*id));
        join(std::move(*id));
      },
      SpanTags{0, 0, rank_, "", kDeviceGroupIdBytes});
}

void DeviceReduce::join(std::vector<std::byte> id) {
  joining_ = true;
  const auto members = static_cast<int>(groups_.members(root_).size());
  // ncclCommInitRank returns once every member called it: it blocks this lane, and the collectives
  // queued behind it wait for it.
  submit(
      collective_stage_, "group join", 0,
      [this, id = std::move(id), members] { group_ = device_.join_group(id, member_, members); },
      [this] {
        joined_ = true;
        for (const auto& [key, iteration] : std::exchange(held_, {})) send_ready(key, iteration);
      },
      SpanTags{0, 0, rank_, "", kDeviceGroupIdBytes});
}

void DeviceReduce::send_ready(std::uint64_t key, std::uint32_t iteration) {
  produced_[key] = iteration;
  Message ready;
  ready.header.recipient = worker_id(root_);
  ready.header.command = Command::kLocalReduce;
  ready.header.partition = static_cast<std::uint32_t>(DeviceReduceOp::kReady);
  ready.header.key = key;
  ready.header.iteration = iteration;
  rt_.send(std::move(ready));
}

void DeviceReduce::stage(const PartitionSpec& partition, std::uint32_t iteration) {
  const PartitionSpec* spec = &partition;
  const bool phantom = options_.phantom;
  // The backward pass's output, on the device: no copy for the group (the kernel is not charged).
  auto produce = [this, spec, iteration, phantom] {
    if (!phantom) device_.produce(*spec, iteration);
  };
  auto produced = [this, spec, iteration] {
    if (is_root()) {
      if (round_.own_staged(*spec, iteration)) start_reduce(*spec, iteration);
    } else if (joined_) {
      send_ready(spec->key, iteration);
    } else {
      held_.emplace_back(spec->key, iteration);
    }
  };
  submit(copy_stage_, "device produce", 0, std::move(produce), std::move(produced),
         SpanTags{partition.key, iteration, rank_, "", partition.bytes});
}

void DeviceReduce::on_message(const Message& message) {
  if (const auto why = round_.stranger(message); !why.empty()) {
    ignore(message, why);
    return;
  }
  const int rank = rank_of(message.header.sender);
  const auto op = static_cast<DeviceReduceOp>(message.header.partition);
  if (!message.header.is_response) {
    if (op != DeviceReduceOp::kReady) {
      ignore(message, "a request can only say a partition is ready");
      return;
    }
    on_ready(message);
    return;
  }
  if (rank != root_) {
    ignore(message, "only the host's root (worker " + std::to_string(root_) + ") leads the group");
    return;
  }
  switch (op) {
    case DeviceReduceOp::kGroupId:
      on_group_id(message);
      return;
    case DeviceReduceOp::kReduce:
    case DeviceReduceOp::kBroadcast:
      on_collective(message, op);
      return;
    case DeviceReduceOp::kReady:
      break;
  }
  ignore(message, "no such collective");
}

void DeviceReduce::on_group_id(const Message& response) {
  if (joining_) {
    ignore(response, "this worker has its group already (a repeat)");
    return;
  }
  if (response.payload.size() != kDeviceGroupIdBytes || response.payload.is_phantom()) {
    ignore(response, "a group id has " + std::to_string(kDeviceGroupIdBytes) + " bytes, this one " +
                         std::to_string(response.payload.size()));
    return;
  }
  const auto bytes = response.payload.bytes();
  join(std::vector<std::byte>(bytes.begin(), bytes.end()));
}

void DeviceReduce::on_ready(const Message& request) {
  const auto ready = round_.ready(request, iteration_);
  if (!ready.ignored.empty()) {
    ignore(request, ready.ignored);
    return;
  }
  if (ready.complete) start_reduce(*ready.complete, request.header.iteration);
}

void DeviceReduce::start_reduce(const PartitionSpec& partition, std::uint32_t iteration) {
  // The members queue the reduce as the root does, in the order the root sends it: one order for all.
  tell_members(DeviceReduceOp::kReduce, partition.key, iteration);
  const PartitionSpec* spec = &partition;
  collective(DeviceReduceOp::kReduce, partition, iteration, [this, spec, iteration] {
    std::shared_ptr<ByteBuffer> region;
    if (!options_.phantom) {
      auto& slot = staging_[spec->key];
      if (!slot) slot = rt_.staging().open(sum_name(spec->key), spec->bytes);
      region = slot;
    }
    // The host's sum, device -> host into the root's staging buffer: the one PCIe copy of the push.
    auto copy_out = [this, spec, region] {
      if (region) group_->copy_out_sum(*spec, region);
    };
    auto push = [this, spec, region] {
      hooks_.push(*spec, region ? Payload::live_view(region) : Payload::phantom(spec->bytes),
                  sum_name(spec->key));
    };
    submit(copy_stage_, "sum copy-out", pcie_seconds(spec->bytes), std::move(copy_out), std::move(push),
           SpanTags{spec->key, iteration, rank_, sum_name(spec->key), spec->bytes});
  });
}

void DeviceReduce::collective(DeviceReduceOp op, const PartitionSpec& partition, std::uint32_t iteration,
                              std::function<void()> done) {
  const PartitionSpec* spec = &partition;
  const bool reduce = op == DeviceReduceOp::kReduce;
  auto work = [this, spec, reduce, phantom = options_.phantom] {
    if (phantom) return;
    if (reduce)
      group_->reduce(*spec);
    else
      group_->broadcast(*spec);
  };
  submit(collective_stage_, reduce ? "nccl reduce" : "nccl broadcast", intra_host_seconds(partition.bytes),
         std::move(work), std::move(done), SpanTags{partition.key, iteration, rank_, "", partition.bytes});
}

void DeviceReduce::on_collective(const Message& response, DeviceReduceOp op) {
  const PartitionSpec* partition = round_.find_partition(response.header.key);
  if (!partition) {
    ignore(response, "no partition has that key");
    return;
  }
  const auto key = partition->key;
  const auto iteration = response.header.iteration;
  // A reduce of what this worker produced, then a broadcast of what it reduced: anything else is not due.
  auto& expected = op == DeviceReduceOp::kReduce ? produced_ : reduced_;
  const auto it = expected.find(key);
  if (it == expected.end() || it->second != iteration) {
    ignore(response, op == DeviceReduceOp::kReduce ? "no partition of that key and iteration is ready"
                                                   : "no partition of that key and iteration was reduced");
    return;
  }
  expected.erase(it);
  if (op == DeviceReduceOp::kReduce) {
    reduced_[key] = iteration;
    collective(DeviceReduceOp::kReduce, *partition, iteration, {});
    return;
  }
  // The aggregate is in this worker's tensors once its broadcast returns; read back for the checks (the
  // aggregates invariant and the model digest see every worker's pull, as on the other paths).
  auto value = std::make_shared<Payload>(Payload::phantom(partition->bytes));
  auto header = response.header;
  collective(DeviceReduceOp::kBroadcast, *partition, iteration, [this, partition, value, header]() mutable {
    auto read = [this, partition, value, phantom = options_.phantom] {
      if (phantom) return;
      const auto values = device_.read(*partition);
      *value = Payload::copy_of(std::as_bytes(std::span(values)));
    };
    auto deliver = [this, value, header]() mutable {
      header.command = Command::kPull;
      header.partition = 0;
      hooks_.deliver(Message{header, std::move(*value)});
    };
    // Charged nothing: the read-back is the checks', not the job's.
    submit(copy_stage_, "aggregate read-back", 0, std::move(read), std::move(deliver),
           SpanTags{header.key, header.iteration, rank_, "", partition->bytes});
  });
}

bool DeviceReduce::share(Message aggregate) {
  PSTWIN_ASSERT(is_root(), "only a host's root shares the aggregate");
  const auto key = aggregate.header.key;
  const auto iteration = aggregate.header.iteration;
  const auto bytes = aggregate.payload.size();
  std::string error;
  const PartitionSpec* partition = round_.aggregate_partition(aggregate, error);
  if (!partition) {
    rt_.fail(error);
    return false;
  }
  auto payload = aggregate.payload;
  auto copy_in = [this, partition, payload] {
    if (!payload.is_phantom()) group_->copy_in_sum(*partition, payload.floats());
  };
  auto shared = std::make_shared<Message>(std::move(aggregate));
  auto start_broadcast = [this, partition, iteration, shared] {
    tell_members(DeviceReduceOp::kBroadcast, partition->key, iteration);
    collective(DeviceReduceOp::kBroadcast, *partition, iteration,
               [this, shared] { hooks_.deliver(std::move(*shared)); });
  };
  submit(copy_stage_, "sum copy-in", pcie_seconds(bytes), std::move(copy_in), std::move(start_broadcast),
         SpanTags{key, iteration, rank_, sum_name(key), bytes});
  return true;
}

std::string DeviceReduce::describe() const {
  std::ostringstream out;
  out << "device reduce (root worker " << root_ << ", member " << member_ << ", "
      << (joined_    ? "joined"
          : joining_ ? "joining"
                     : "no group yet")
      << "): ";
  if (is_root())
    out << round_.waiting() << " partitions waiting for the host's workers";
  else
    out << produced_.size() << " partitions waiting for their reduce, " << reduced_.size()
        << " for their broadcast, " << held_.size() << " held until the group is joined";
  return out.str();
}

}  // namespace pstwin
