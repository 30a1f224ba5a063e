#include "ps/device.hpp"

#include <algorithm>
#include <string>

namespace pstwin {

EmulatedDevice::EmulatedDevice(const SyntheticWorkload& workload, int rank)
    : workload_(workload), rank_(rank), memory_(workload.partitions().size()) {
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

}  // namespace pstwin
