// The synthetic workload: declared tensors, a compute time per iteration, and worker-distinct values
// chosen so that every aggregate is exactly checkable in float32.
//
// value(w, i, k, j) = 1 + (w mod m) + ((i + k + j) mod 8), small integers, so every partial sum
// stays below 2^24 and float addition is exact in any order. m is the largest modulus that keeps
// the largest possible sum (all workers, and all iterations in async mode) under 2^24; it equals the
// number of workers whenever that fits, so two workers never share values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ps/keys.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

class SyntheticWorkload {
 public:
  explicit SyntheticWorkload(const Scenario& scenario);

  const std::vector<PartitionSpec>& partitions() const { return partitions_; }
  const PartitionSpec& partition(std::uint64_t key) const;
  std::size_t index_of(std::uint64_t key) const;  // position in partitions(); throws if unknown
  std::uint64_t model_bytes() const { return model_bytes_; }
  int workers() const { return workers_; }
  int iterations() const { return iterations_; }
  std::uint64_t worker_modulus() const { return modulus_; }

  float value(int worker_rank, std::uint32_t iteration, std::uint64_t key, std::size_t element) const;
  void fill(int worker_rank, std::uint32_t iteration, std::uint64_t key, std::span<float> out) const;
  // Sum over all workers of one iteration's values (what a sync aggregate must hold).
  float expected_round_sum(std::uint32_t iteration, std::uint64_t key, std::size_t element) const;
  // Sum over all workers and all iterations (what an async store must hold at the end).
  float expected_total(std::uint64_t key, std::size_t element) const;

 private:
  std::vector<PartitionSpec> partitions_;
  std::vector<std::size_t> index_by_key_order_;  // partitions_ indices sorted by key, for lookup
  std::uint64_t model_bytes_ = 0;
  int workers_ = 0;
  int iterations_ = 0;
  std::uint64_t modulus_ = 1;
  std::uint64_t worker_term_sum_ = 0;  // sum over w of (w mod m)
};

}  // namespace pstwin
