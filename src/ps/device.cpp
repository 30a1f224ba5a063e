#include "ps/device.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace pstwin {

void submit_device_work(Runtime& runtime, Executor& stage, std::string_view label, ComputeCost cost,
                        std::function<void()> work, std::function<void()> done, std::string who,
                        std::optional<SpanTags> tags) {
  auto error = std::make_shared<std::string>();  // written by `work` on the lane, read by `done` after it
  auto guarded = [work = std::move(work), error] {
    try {
      if (work) work();
    } catch (const std::exception& e) {
      *error = e.what();
    }
  };
  auto checked = [&runtime, error, done = std::move(done), who = std::move(who)] {
    if (!error->empty()) {
      runtime.fail(who + ": " + *error);
      return;
    }
    if (done) done();
  };
  if (tags)
    stage.submit_tagged(0, label, cost, std::move(guarded), std::move(checked), std::move(*tags));
  else
    stage.submit(0, label, cost, std::move(guarded), std::move(checked));
}

EmulatedDevice::EmulatedDevice(const SyntheticWorkload& workload, int rank,
                               std::shared_ptr<EmulatedGroups> groups)
    : workload_(workload), rank_(rank), groups_(std::move(groups)), memory_(workload.partitions().size()) {
  for (std::size_t i = 0; i < memory_.size(); ++i)
    memory_[i].assign(workload.partitions()[i].bytes / sizeof(float), 0.0f);
}

std::vector<float>& EmulatedDevice::memory(const PartitionSpec& partition) {
  return memory_[workload_.index_of(partition.key)];
}

void EmulatedDevice::produce(const PartitionSpec& partition, std::uint32_t iteration) {
  workload_.fill(rank_, iteration, partition.key, memory(partition));
}

void EmulatedDevice::copy_out(const PartitionSpec& partition, const std::shared_ptr<ByteBuffer>& staging) {
  const auto& values = memory(partition);
  if (staging->size() < values.size() * sizeof(float))
    throw DeviceError("copy of key " + std::to_string(partition.key) + ": staging buffer of " +
                      std::to_string(staging->size()) + " bytes is smaller than the partition");
  std::copy(values.begin(), values.end(), staging->floats().begin());
}

void EmulatedDevice::copy_in(const PartitionSpec& partition, std::span<const float> aggregate) {
  auto& values = memory(partition);
  if (aggregate.size() != values.size())
    throw DeviceError("copy of the aggregate of key " + std::to_string(partition.key) + ": " +
                      std::to_string(aggregate.size() * sizeof(float)) + " bytes for a partition of " +
                      std::to_string(values.size() * sizeof(float)));
  std::copy(aggregate.begin(), aggregate.end(), values.begin());
}

std::vector<float> EmulatedDevice::read(const PartitionSpec& partition) {
  return memory(partition);
}

std::vector<std::byte> EmulatedDevice::new_group_id() {
  if (!groups_) throw DeviceError("new group id: this emulated device belongs to no job's groups");
  return groups_->new_id();
}

std::unique_ptr<DeviceGroup> EmulatedDevice::join_group(std::span<const std::byte> id, int member,
                                                        int members) {
  if (!groups_) throw DeviceError("join group: this emulated device belongs to no job's groups");
  return groups_->join(*this, id, member, members);
}

// ---------------------------------------------------------------- EmulatedGroups

std::vector<std::byte> EmulatedGroups::new_id() {
  // "emulated group N", zero-padded to an ncclUniqueId's size: unique within the job, the same every run.
  const std::string name = "emulated group " + std::to_string(next_++);
  std::vector<std::byte> id(kDeviceGroupIdBytes, std::byte{0});
  std::transform(name.begin(), name.end(), id.begin(), [](char c) { return static_cast<std::byte>(c); });
  groups_[id];
  return id;
}

// A member's handle: unregisters on destruction, so a group never points at a destroyed device.
class EmulatedMember final : public DeviceGroup {
 public:
  EmulatedMember(std::shared_ptr<EmulatedGroups> groups, std::vector<std::byte> id, int member, int members,
                 EmulatedDevice& device)
      : groups_(std::move(groups)), id_(std::move(id)), member_(member), members_(members), device_(device) {}
  ~EmulatedMember() override {
    const auto it = groups_->groups_.find(id_);
    if (it == groups_->groups_.end()) return;
    it->second.members[static_cast<std::size_t>(member_)] = nullptr;
    if (std::ranges::all_of(it->second.members, [](const EmulatedDevice* d) { return d == nullptr; }))
      groups_->groups_.erase(it);
  }
  EmulatedMember(const EmulatedMember&) = delete;
  EmulatedMember& operator=(const EmulatedMember&) = delete;

  std::string describe() const override {
    return "emulated group of " + std::to_string(members_) + ", member " + std::to_string(member_);
  }

  void reduce(const PartitionSpec& partition) override {
    if (member_ != 0) return;  // the root's call reads every member's values: a member's own moves nothing
    auto& state = group();
    std::vector<float> sum(partition.bytes / sizeof(float), 0.0f);
    for (std::size_t m = 0; m < state.members.size(); ++m) {
      if (state.members[m] == nullptr)
        throw DeviceError("reduce of key " + std::to_string(partition.key) + ": member " + std::to_string(m) +
                          " of the group has not joined");
      const auto& values = state.members[m]->memory(partition);
      for (std::size_t j = 0; j < sum.size(); ++j) sum[j] += values[j];
    }
    state.sums[partition.key] = std::move(sum);
  }

  void broadcast(const PartitionSpec& partition) override {
    const auto& sums = group().sums;
    const auto it = sums.find(partition.key);
    if (it == sums.end())
      throw DeviceError("broadcast of key " + std::to_string(partition.key) +
                        ": the root holds no sum of it");
    auto& values = device_.memory(partition);
    std::copy(it->second.begin(), it->second.end(), values.begin());
  }

  void copy_out_sum(const PartitionSpec& partition, const std::shared_ptr<ByteBuffer>& staging) override {
    const auto& sums = root_only("copy of the sum").sums;
    const auto it = sums.find(partition.key);
    if (it == sums.end())
      throw DeviceError("copy of the sum of key " + std::to_string(partition.key) + ": nothing reduced yet");
    if (staging->size() < it->second.size() * sizeof(float))
      throw DeviceError("copy of the sum of key " + std::to_string(partition.key) + ": staging buffer of " +
                        std::to_string(staging->size()) + " bytes is smaller than the partition");
    std::copy(it->second.begin(), it->second.end(), staging->floats().begin());
  }

  void copy_in_sum(const PartitionSpec& partition, std::span<const float> aggregate) override {
    auto& state = root_only("copy of the aggregate");
    if (aggregate.size_bytes() != partition.bytes)
      throw DeviceError("copy of the aggregate of key " + std::to_string(partition.key) + ": " +
                        std::to_string(aggregate.size_bytes()) + " bytes for a partition of " +
                        std::to_string(partition.bytes));
    state.sums[partition.key].assign(aggregate.begin(), aggregate.end());
  }

 private:
  EmulatedGroups::Group& group() const { return groups_->groups_.at(id_); }
  EmulatedGroups::Group& root_only(const std::string& what) const {
    if (member_ != 0) throw DeviceError(what + ": member " + std::to_string(member_) + " is not the root");
    return group();
  }

  std::shared_ptr<EmulatedGroups> groups_;
  std::vector<std::byte> id_;
  const int member_;
  const int members_;
  EmulatedDevice& device_;
};

std::unique_ptr<DeviceGroup> EmulatedGroups::join(EmulatedDevice& device, std::span<const std::byte> id,
                                                  int member, int members) {
  const std::vector<std::byte> key(id.begin(), id.end());
  const auto it = groups_.find(key);
  if (it == groups_.end()) throw DeviceError("join group: no emulated group has that id");
  if (members < 1 || member < 0 || member >= members)
    throw DeviceError("join group: member " + std::to_string(member) + " of " + std::to_string(members));
  auto& slots = it->second.members;
  if (slots.empty()) slots.assign(static_cast<std::size_t>(members), nullptr);
  if (slots.size() != static_cast<std::size_t>(members))
    throw DeviceError("join group: " + std::to_string(members) + " members, but the group has " +
                      std::to_string(slots.size()));
  if (slots[static_cast<std::size_t>(member)] != nullptr)
    throw DeviceError("join group: member " + std::to_string(member) + " joined already");
  slots[static_cast<std::size_t>(member)] = &device;
  return std::make_unique<EmulatedMember>(shared_from_this(), key, member, members, device);
}

}  // namespace pstwin
