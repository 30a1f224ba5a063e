#include "ps/workload.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

namespace pstwin {

SyntheticWorkload::SyntheticWorkload(const Scenario& scenario)
    : workers_(scenario.roles.workers), iterations_(scenario.workload.iterations) {
  const auto tensors = scenario.declared_tensor_bytes();
  model_bytes_ = std::accumulate(tensors.begin(), tensors.end(), std::uint64_t{0});
  partitions_ =
      partition_tensors(tensors, scenario.ps.partition_bytes, scenario.roles.servers, scenario.ps.key_hash);
  if (!scenario.ps.priority_scheduling)
    for (auto& partition : partitions_) partition.priority = 0;
  index_by_key_order_.resize(partitions_.size());
  std::iota(index_by_key_order_.begin(), index_by_key_order_.end(), std::size_t{0});
  std::sort(index_by_key_order_.begin(), index_by_key_order_.end(),
            [&](std::size_t a, std::size_t b) { return partitions_[a].key < partitions_[b].key; });

  // Largest single value is m + 8; the largest sum adds it `contributions` times.
  const std::uint64_t contributions =
      static_cast<std::uint64_t>(workers_) * (scenario.ps.mode == TrainingMode::kAsync ? iterations_ : 1);
  const std::uint64_t limit = (std::uint64_t{1} << 24) / std::max<std::uint64_t>(contributions, 1);
  modulus_ = std::clamp<std::uint64_t>(limit > 9 ? limit - 9 : 1, 1, static_cast<std::uint64_t>(workers_));
  for (int w = 0; w < workers_; ++w) worker_term_sum_ += static_cast<std::uint64_t>(w) % modulus_;
}

const PartitionSpec& SyntheticWorkload::partition(std::uint64_t key) const {
  return partitions_[index_of(key)];
}

std::size_t SyntheticWorkload::index_of(std::uint64_t key) const {
  auto it = std::lower_bound(index_by_key_order_.begin(), index_by_key_order_.end(), key,
                             [&](std::size_t index, std::uint64_t k) { return partitions_[index].key < k; });
  if (it == index_by_key_order_.end() || partitions_[*it].key != key)
    throw std::out_of_range("no partition with key " + std::to_string(key));
  return *it;
}

float SyntheticWorkload::value(int worker_rank, std::uint32_t iteration, std::uint64_t key,
                               std::size_t element) const {
  const std::uint64_t shared = (iteration + key + element) % 8;
  return static_cast<float>(1 + static_cast<std::uint64_t>(worker_rank) % modulus_ + shared);
}

void SyntheticWorkload::fill(int worker_rank, std::uint32_t iteration, std::uint64_t key,
                             std::span<float> out) const {
  const auto base = static_cast<float>(1 + static_cast<std::uint64_t>(worker_rank) % modulus_);
  const std::uint64_t phase = (iteration + key) % 8;
  // The same values as base + (phase + j) % 8, copied from a table of eight, 32 bytes at a time: a
  // modulo and an int-to-float conversion per element were 10 % of a 1 MiB loopback bench's cycles.
  std::array<float, 8> pattern{};
  for (std::size_t k = 0; k < pattern.size(); ++k) pattern[k] = base + static_cast<float>((phase + k) % 8);
  std::size_t j = 0;
  for (; j + pattern.size() <= out.size(); j += pattern.size())
    std::memcpy(out.data() + j, pattern.data(), sizeof pattern);
  for (; j < out.size(); ++j) out[j] = pattern[j % pattern.size()];
}

float SyntheticWorkload::expected_round_sum(std::uint32_t iteration, std::uint64_t key,
                                            std::size_t element) const {
  const auto n = static_cast<std::uint64_t>(workers_);
  const std::uint64_t shared = (iteration + key + element) % 8;
  return static_cast<float>(n + worker_term_sum_ + n * shared);
}

float SyntheticWorkload::expected_total(std::uint64_t key, std::size_t element) const {
  std::uint64_t total = 0;
  const auto n = static_cast<std::uint64_t>(workers_);
  for (int i = 0; i < iterations_; ++i)
    total += n + worker_term_sum_ + n * ((static_cast<std::uint64_t>(i) + key + element) % 8);
  return static_cast<float>(total);
}

}  // namespace pstwin
