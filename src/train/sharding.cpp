#include "train/sharding.hpp"

#include <fmt/core.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace pstwin::train {

namespace {

constexpr int kMaxDirichletDraws = 1000;

// Marsaglia and Tsang (2000), shape >= 1.
double gamma_at_least_one(RandomStream& rng, double shape) {
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = rng.normal(0.0, 1.0);
    const double t = 1.0 + c * x;
    if (t <= 0) continue;
    const double v = t * t * t;
    const double u = 1.0 - rng.uniform01();  // (0, 1]: log(u) is finite
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

// log Gamma(shape, 1) draw: for shape < 1 the draw itself can underflow to 0, its log cannot.
double log_gamma_draw(RandomStream& rng, double shape) {
  if (shape >= 1) return std::log(gamma_at_least_one(rng, shape));
  const double boosted = gamma_at_least_one(rng, shape + 1.0);
  const double u = 1.0 - rng.uniform01();
  return std::log(boosted) + std::log(u) / shape;
}

// Dirichlet(alpha, ..., alpha) over `parts`, normalised in log space.
std::vector<double> dirichlet_draw(RandomStream& rng, double alpha, std::size_t parts) {
  std::vector<double> logs(parts);
  for (double& l : logs) l = log_gamma_draw(rng, alpha);
  const double top = *std::max_element(logs.begin(), logs.end());
  double sum = 0;
  for (double& l : logs) {
    l = std::exp(l - top);
    sum += l;
  }
  for (double& l : logs) l /= sum;
  return logs;
}

void check_config(std::span<const std::uint8_t> labels, int classes, const ShardConfig& config) {
  if (labels.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw std::invalid_argument(fmt::format("shards: {} samples, at most 2^32 - 1", labels.size()));
  }
  if (classes < 1 || classes > 256) {
    throw std::invalid_argument(fmt::format("shards: classes = {}, must be 1..256", classes));
  }
  if (config.workers < 1) {
    throw std::invalid_argument(fmt::format("shards workers = {}: need at least 1 worker", config.workers));
  }
  if (config.validators < 0) {
    throw std::invalid_argument(fmt::format("shards validators = {}: must be >= 0", config.validators));
  }
  const auto held_out = static_cast<std::size_t>(config.validators) * config.validator_samples;
  if (held_out >= labels.size()) {
    throw std::invalid_argument(
        fmt::format("shards validator_samples = {}: {} validator(s) would hold {} of the {} samples, leaving "
                    "none for the "
                    "workers; lower validator_samples",
                    config.validator_samples, config.validators, held_out, labels.size()));
  }
  const std::size_t left = labels.size() - held_out;
  if (config.kind == ShardKind::kIid) {
    const std::size_t wanted = config.worker_samples * static_cast<std::size_t>(config.workers);
    if (wanted > left) {
      throw std::invalid_argument(
          fmt::format("shards worker_samples = {}: {} workers need {} samples, only {} are left after the "
                      "validators; lower worker_samples (0 splits what is left)",
                      config.worker_samples, config.workers, wanted, left));
    }
    if (config.worker_samples == 0 && left < static_cast<std::size_t>(config.workers)) {
      throw std::invalid_argument(
          fmt::format("shards workers = {}: only {} samples are left for them", config.workers, left));
    }
  } else {
    if (!std::isfinite(config.alpha) || config.alpha <= 0) {
      throw std::invalid_argument(fmt::format(
          "shards alpha = {}: the Dirichlet concentration must be a finite number > 0 (e.g. 0.5; large is "
          "close to iid)",
          config.alpha));
    }
    if (config.worker_samples != 0) {
      throw std::invalid_argument(
          "shards worker_samples applies to iid shards only; dirichlet shards split everything left");
    }
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= classes) {
      throw std::invalid_argument(
          fmt::format("shards: label {} of sample {} is not a class 0..{}", labels[i], i, classes - 1));
    }
  }
}

std::vector<std::vector<std::uint32_t>> dirichlet_split(std::span<const std::uint32_t> pool,
                                                        std::span<const std::uint8_t> labels, int classes,
                                                        const ShardConfig& config) {
  std::vector<std::vector<std::uint32_t>> by_class(static_cast<std::size_t>(classes));
  for (const std::uint32_t index : pool) by_class[labels[index]].push_back(index);

  const auto workers = static_cast<std::size_t>(config.workers);
  RandomStream rng(config.seed, "train.shard.dirichlet");
  for (int attempt = 0; attempt < kMaxDirichletDraws; ++attempt) {
    std::vector<std::vector<std::uint32_t>> shards(workers);
    for (const auto& members : by_class) {
      const std::vector<double> p = dirichlet_draw(rng, config.alpha, workers);
      const auto n = static_cast<double>(members.size());
      double cumulative = 0;
      std::size_t begin = 0;
      for (std::size_t w = 0; w < workers; ++w) {
        cumulative += p[w];
        const std::size_t end =
            w + 1 == workers ? members.size()
                             : std::min(members.size(), static_cast<std::size_t>(std::floor(n * cumulative)));
        if (end > begin)
          shards[w].insert(shards[w].end(), members.begin() + static_cast<std::ptrdiff_t>(begin),
                           members.begin() + static_cast<std::ptrdiff_t>(end));
        begin = std::max(begin, end);
      }
    }
    const bool enough = std::all_of(shards.begin(), shards.end(),
                                    [&](const auto& s) { return s.size() >= config.min_worker_samples; });
    if (enough) return shards;
  }
  throw std::invalid_argument(
      fmt::format("shards alpha = {}: after {} Dirichlet draws some of the {} workers still had fewer than "
                  "min_worker_samples = {} samples; raise alpha or lower min_worker_samples",
                  config.alpha, kMaxDirichletDraws, config.workers, config.min_worker_samples));
}

}  // namespace

double gamma_draw(RandomStream& rng, double shape) {
  if (!std::isfinite(shape) || shape <= 0) {
    throw std::invalid_argument(fmt::format("gamma_draw: shape = {}, must be a finite number > 0", shape));
  }
  return shape >= 1 ? gamma_at_least_one(rng, shape) : std::exp(log_gamma_draw(rng, shape));
}

void shuffle(std::span<std::uint32_t> values, RandomStream& rng) {
  for (std::size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(rng.below(i));
    std::swap(values[i - 1], values[j]);
  }
}

ShardSet make_shards(std::span<const std::uint8_t> labels, int classes, const ShardConfig& config) {
  check_config(labels, classes, config);
  std::vector<std::uint32_t> order(labels.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::uint32_t>(i);
  RandomStream permute(config.seed, "train.shard.permute");
  shuffle(order, permute);

  ShardSet set;
  auto take = [&](std::size_t begin, std::size_t count) {
    std::vector<std::uint32_t> shard(order.begin() + static_cast<std::ptrdiff_t>(begin),
                                     order.begin() + static_cast<std::ptrdiff_t>(begin + count));
    std::sort(shard.begin(), shard.end());
    return shard;
  };
  std::size_t next = 0;
  for (int v = 0; v < config.validators; ++v) {
    set.validators.push_back(take(next, config.validator_samples));
    next += config.validator_samples;
  }
  const auto workers = static_cast<std::size_t>(config.workers);
  if (config.kind == ShardKind::kIid) {
    const std::size_t left = order.size() - next;
    for (std::size_t w = 0; w < workers; ++w) {
      const std::size_t count =
          config.worker_samples != 0 ? config.worker_samples : left / workers + (w < left % workers ? 1 : 0);
      set.workers.push_back(take(next, count));
      next += count;
    }
  } else {
    set.workers = dirichlet_split(std::span(order).subspan(next), labels, classes, config);
    for (auto& shard : set.workers) std::sort(shard.begin(), shard.end());
  }
  return set;
}

BatchSampler::BatchSampler(std::vector<std::uint32_t> shard, std::size_t batch_size, RandomStream rng)
    : order_(std::move(shard)), batch_size_(std::min(batch_size, order_.size())), rng_(rng) {
  if (order_.empty())
    throw std::invalid_argument("BatchSampler: the shard is empty (no samples to train on)");
  if (batch_size == 0) throw std::invalid_argument("BatchSampler: batch_size must be >= 1");
  shuffle(order_, rng_);
}

std::span<const std::uint32_t> BatchSampler::next() {
  if (position_ + batch_size_ > order_.size()) {
    shuffle(order_, rng_);
    position_ = 0;
    ++epoch_;
  }
  const auto batch = std::span<const std::uint32_t>(order_).subspan(position_, batch_size_);
  position_ += batch_size_;
  return batch;
}

}  // namespace pstwin::train
