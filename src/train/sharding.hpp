// Splits a training set across workers and validators, and draws minibatches, from seeded streams.
//
// make_shards (every sample lands in at most one shard):
//   1. Shuffle all sample indices (Fisher-Yates, stream "train.shard.permute").
//   2. Validator v takes the next `validator_samples` indices of that order: IID held-out shards.
//   3. The rest goes to the workers:
//      - iid: cut into `workers` consecutive runs whose sizes differ by at most 1 (the first
//        remainder workers get one more); with `worker_samples` > 0 each worker keeps only that many.
//      - dirichlet(alpha): for each class c in order 0..C-1, draw proportions p ~ Dir(alpha) over the
//        workers (Gamma(alpha, 1) draws, normalised; stream "train.shard.dirichlet"), and give worker w
//        the class's samples (in shuffled order) from floor(n_c * P_{w}) to floor(n_c * P_{w+1}),
//        where P_w is the sum of p_0..p_{w-1}. Small alpha concentrates each class on few workers.
//        If a worker ends up with fewer than `min_worker_samples`, all classes are drawn again
//        (the stream goes on), at most 1000 times, then it is an error naming alpha.
//      Gamma(a, 1): Marsaglia and Tsang (2000) for a >= 1; for a < 1, Gamma(a + 1) * U^(1/a).
//   Each shard is returned in ascending index order (its content, not its visiting order).
// BatchSampler visits a shard in epochs: each epoch a fresh Fisher-Yates shuffle, consecutive
// batches of `batch_size` (a final short batch of an epoch is dropped, so every batch is full).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/random.hpp"

namespace pstwin::train {

enum class ShardKind { kIid, kDirichlet };

struct ShardConfig {
  int workers = 1;
  int validators = 0;
  std::size_t validator_samples = 0;  // held-out samples per validator
  std::size_t worker_samples = 0;     // iid only: samples per worker (0: all that is left, split evenly)
  ShardKind kind = ShardKind::kIid;
  double alpha = 1.0;                  // dirichlet concentration (> 0)
  std::size_t min_worker_samples = 1;  // dirichlet: redraw while a worker has fewer
  std::uint64_t seed = 0;
};

struct ShardSet {
  std::vector<std::vector<std::uint32_t>> workers;     // ascending sample indices
  std::vector<std::vector<std::uint32_t>> validators;  // ascending sample indices
};

// `labels`: one class id per sample (< classes). Throws std::invalid_argument naming the field when
// the config cannot be met (e.g. more held-out samples than the data set has).
ShardSet make_shards(std::span<const std::uint8_t> labels, int classes, const ShardConfig& config);

// Gamma(shape, 1) from `rng` (the algorithm in the header comment). shape > 0.
double gamma_draw(RandomStream& rng, double shape);

// Shuffles `values` in place: Fisher-Yates from the last position down, j = rng.below(i + 1).
void shuffle(std::span<std::uint32_t> values, RandomStream& rng);

class BatchSampler {
 public:
  // `shard` must not be empty; a batch larger than the shard is cut to the shard's size.
  BatchSampler(std::vector<std::uint32_t> shard, std::size_t batch_size, RandomStream rng);

  // The next minibatch's sample indices (valid until the next call).
  std::span<const std::uint32_t> next();
  std::size_t batch_size() const { return batch_size_; }
  std::uint64_t epoch() const { return epoch_; }

 private:
  std::vector<std::uint32_t> order_;
  std::size_t batch_size_ = 0;
  std::size_t position_ = 0;
  std::uint64_t epoch_ = 0;
  RandomStream rng_;
};

}  // namespace pstwin::train
