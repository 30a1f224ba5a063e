#include "zeno/attacks.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>

#include <boost/math/distributions/normal.hpp>

#include "zeno/vector_math.hpp"

namespace pstwin::zeno {

namespace {

constexpr std::array kAttacks = {
    AttackInfo{AttackKind::kNone, "none"},
    AttackInfo{AttackKind::kSignFlip, "sign-flip"},
    AttackInfo{AttackKind::kGaussian, "gaussian"},
    AttackInfo{AttackKind::kNormMatched, "norm-matched"},
    AttackInfo{AttackKind::kLabelFlip, "label-flip"},
    AttackInfo{AttackKind::kBitFlip, "bit-flip"},
    AttackInfo{AttackKind::kAlie, "alie"},
    AttackInfo{AttackKind::kIpm, "ipm"},
    AttackInfo{AttackKind::kValidator, "validator"},
};

[[noreturn]] void bad(const std::string& message) {
  throw std::invalid_argument(message);
}

// The honest updates' common size; the attack's name goes into every error.
std::size_t honest_size(std::string_view attack, std::span<const std::span<const float>> honest) {
  if (honest.empty()) {
    bad(std::string(attack) +
        ": no honest updates to look at: pass the round's honest updates in AttackInputs");
  }
  for (std::size_t h = 1; h < honest.size(); ++h) {
    if (honest[h].size() != honest[0].size()) {
      bad(std::string(attack) + ": honest update " + std::to_string(h) + " has " +
          std::to_string(honest[h].size()) + " floats but update 0 has " + std::to_string(honest[0].size()));
    }
  }
  return honest[0].size();
}

// Per-element mean (and, if wanted, sample standard deviation) of the honest updates, in order.
std::vector<double> honest_mean(std::span<const std::span<const float>> honest, std::size_t size) {
  std::vector<double> mean(size, 0.0);
  for (const auto& h : honest) {
    for (std::size_t i = 0; i < size; ++i) mean[i] += h[i];
  }
  for (double& m : mean) m /= static_cast<double>(honest.size());
  return mean;
}

std::vector<double> gaussian_direction(std::size_t size, RandomStream& rng) {
  std::vector<double> direction(size);
  for (double& x : direction) x = rng.normal(0.0, 1.0);
  return direction;
}

double norm(std::span<const double> x) {
  double sum = 0;
  for (const double e : x) sum += e * e;
  return std::sqrt(sum);
}

}  // namespace

std::span<const AttackInfo> attack_infos() {
  return kAttacks;
}

AttackKind parse_attack(std::string_view name) {
  return parse_in<AttackKind>(kAttacks, name, "attack");
}

void validate(const AttackConfig& config) {
  switch (config.kind) {
    case AttackKind::kNone:
    case AttackKind::kLabelFlip:
      return;
    case AttackKind::kSignFlip:
      require_field(std::isfinite(config.sign_flip.scale) && config.sign_flip.scale > 0, "sign_flip.scale",
                    config.sign_flip.scale, "use a finite factor > 0 (the update is sent as -scale * u)");
      return;
    case AttackKind::kGaussian:
      require_field(std::isfinite(config.gaussian.sigma) && config.gaussian.sigma > 0, "gaussian.sigma",
                    config.gaussian.sigma, "use a finite standard deviation > 0");
      return;
    case AttackKind::kNormMatched:
      require_field(std::isfinite(config.norm_matched.scale) && config.norm_matched.scale > 0,
                    "norm_matched.scale", config.norm_matched.scale, "use a finite factor > 0");
      return;
    case AttackKind::kBitFlip: {
      const BitFlipConfig& c = config.bit_flip;
      require_field(c.rate >= 0 && c.rate <= 1, "bit_flip.rate", c.rate, "use a share of elements in [0, 1]");
      if (c.bits.empty())
        bad("bit_flip.bits is empty: name at least one bit position 0..31 (30 = exponent top)");
      std::uint32_t seen = 0;
      for (const int bit : c.bits) {
        require_field(bit >= 0 && bit <= 31, "bit_flip.bits[]", bit, "bit positions are 0..31 (31 = sign)");
        require_field((seen & (1u << bit)) == 0, "bit_flip.bits[]", bit, "each bit may be listed once");
        seen |= 1u << bit;
      }
      return;
    }
    case AttackKind::kAlie: {
      const AlieConfig& c = config.alie;
      require_field(std::isfinite(c.z) && c.z >= 0, "alie.z", c.z,
                    "use 0 (derive z from n and f) or a finite z > 0");
      if (c.z == 0) {
        require_field(c.byzantine >= 1 && 2 * c.byzantine <= c.workers, "alie.byzantine",
                      static_cast<double>(c.byzantine),
                      "z from the paper needs 1 <= f <= n / 2 with n = alie.workers = " +
                          std::to_string(c.workers) + "; or set alie.z directly");
      }
      return;
    }
    case AttackKind::kIpm:
      require_field(std::isfinite(config.ipm.epsilon) && config.ipm.epsilon > 0, "ipm.epsilon",
                    config.ipm.epsilon,
                    "use a finite factor > 0 (the update is sent as -epsilon * mean of the honest)");
      return;
    case AttackKind::kValidator: {
      const ValidatorAttackConfig& c = config.validator;
      require_field(std::isfinite(c.rho), "validator.rho", c.rho, "use the validator's (finite) rho");
      require_field(std::isfinite(c.norm_bound) && c.norm_bound > 0, "validator.norm_bound", c.norm_bound,
                    "use the validator's c (> 0, ZenoPS: 1.6)");
      require_field(std::isfinite(c.margin) && c.margin > 0, "validator.margin", c.margin,
                    "use a small margin > 0 (0.01: <u,v> passes rho ||v||^2 by 1 % of ||v||^2)");
      require_field(c.norm_fraction > 0 && c.norm_fraction < 1, "validator.norm_fraction", c.norm_fraction,
                    "use a value in (0, 1): ||u||^2 is that share of c ||v||^2");
      const double along = c.rho + c.margin;
      require_field(along * along < c.norm_fraction * c.norm_bound, "validator.margin", c.margin,
                    "(rho + margin)^2 must stay below norm_fraction * norm_bound, or no room is left for the "
                    "orthogonal part: lower the margin or raise norm_fraction");
      return;
    }
  }
  bad("unknown attack kind " + std::to_string(static_cast<int>(config.kind)));
}

// Each attack validates its own config, so calling one directly is as safe as going through here.
std::vector<float> apply_attack(const AttackConfig& config, const AttackInputs& in, RandomStream& rng) {
  switch (config.kind) {
    case AttackKind::kNone:
      return {in.own.begin(), in.own.end()};
    case AttackKind::kSignFlip:
      return sign_flip(in.own, config.sign_flip);
    case AttackKind::kGaussian:
      return gaussian(in.own.size(), config.gaussian, rng);
    case AttackKind::kNormMatched:
      return norm_matched(in.own, config.norm_matched, rng);
    case AttackKind::kLabelFlip:
      bad("label-flip is a data attack: relabel the batch before the gradient (ShardTrainer::set_label_map "
          "with "
          "label_flip_map), do not transform the update");
    case AttackKind::kBitFlip:
      return bit_flip(in.own, config.bit_flip, rng);
    case AttackKind::kAlie:
      return alie(in.honest, config.alie);
    case AttackKind::kIpm:
      return ipm(in.honest, config.ipm);
    case AttackKind::kValidator:
      return validator_attack(in.honest, in.reference, in.tensors, config.validator, rng);
  }
  bad("unknown attack kind " + std::to_string(static_cast<int>(config.kind)));
}

RandomStream attack_stream(std::uint64_t seed, std::uint64_t round, std::uint32_t worker) {
  return RandomStream(seed, "zeno.attack", (round << 32) | worker);
}

std::vector<float> sign_flip(std::span<const float> own, const SignFlipConfig& config) {
  validate(AttackConfig{.kind = AttackKind::kSignFlip, .sign_flip = config});
  std::vector<float> out(own.size());
  for (std::size_t i = 0; i < own.size(); ++i) out[i] = static_cast<float>(-config.scale * own[i]);
  return out;
}

std::vector<float> gaussian(std::size_t size, const GaussianConfig& config, RandomStream& rng) {
  validate(AttackConfig{.kind = AttackKind::kGaussian, .gaussian = config});
  std::vector<float> out(size);
  for (float& x : out) x = static_cast<float>(rng.normal(0.0, config.sigma));
  return out;
}

std::vector<float> norm_matched(std::span<const float> own, const NormMatchedConfig& config,
                                RandomStream& rng) {
  validate(AttackConfig{.kind = AttackKind::kNormMatched, .norm_matched = config});
  const std::vector<double> direction = gaussian_direction(own.size(), rng);
  const double length = norm(direction);
  const double target = config.scale * std::sqrt(squared_norm(own));
  std::vector<float> out(own.size(), 0.0f);
  if (length == 0) return out;
  for (std::size_t i = 0; i < own.size(); ++i) out[i] = static_cast<float>(direction[i] * (target / length));
  return out;
}

std::size_t bit_flip_count(std::size_t size, double rate) {
  return static_cast<std::size_t>(std::llround(rate * static_cast<double>(size)));
}

std::vector<float> bit_flip(std::span<const float> own, const BitFlipConfig& config, RandomStream& rng) {
  validate(AttackConfig{.kind = AttackKind::kBitFlip, .bit_flip = config});
  std::uint32_t mask = 0;
  for (const int bit : config.bits) mask |= 1u << bit;
  const std::size_t size = own.size();
  const std::size_t count = std::min(bit_flip_count(size, config.rate), size);
  // Floyd's sampling: `count` distinct elements with count draws; the chosen set, not the draw order,
  // decides the output, so marking them is enough.
  std::vector<bool> chosen(size, false);
  for (std::size_t j = size - count; j < size; ++j) {
    const std::size_t t = rng.below(j + 1);
    chosen[chosen[t] ? j : t] = true;
  }
  std::vector<float> out(own.begin(), own.end());
  for (std::size_t i = 0; i < size; ++i) {
    if (chosen[i]) out[i] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(out[i]) ^ mask);
  }
  return out;
}

double alie_z(std::size_t workers, std::size_t byzantine) {
  if (byzantine < 1 || 2 * byzantine > workers) {
    bad("alie: z from the paper needs 1 <= f <= n / 2, got n = " + std::to_string(workers) +
        " workers and f = " + std::to_string(byzantine) + " Byzantine: fix alie.workers / alie.byzantine");
  }
  const double n = static_cast<double>(workers);
  const double s = std::floor(n / 2 + 1) - static_cast<double>(byzantine);  // supporters the attacker needs
  return boost::math::quantile(boost::math::normal(), (n - s) / n);
}

std::vector<float> alie(std::span<const std::span<const float>> honest, const AlieConfig& config) {
  validate(AttackConfig{.kind = AttackKind::kAlie, .alie = config});
  const std::size_t size = honest_size("alie", honest);
  const double z = config.z > 0 ? config.z : alie_z(config.workers, config.byzantine);
  const std::vector<double> mean = honest_mean(honest, size);
  std::vector<double> variance(size, 0.0);
  for (const auto& h : honest) {
    for (std::size_t i = 0; i < size; ++i) {
      const double d = h[i] - mean[i];
      variance[i] += d * d;
    }
  }
  const double dof = honest.size() > 1 ? static_cast<double>(honest.size() - 1) : 1.0;  // sample std
  std::vector<float> out(size);
  for (std::size_t i = 0; i < size; ++i)
    out[i] = static_cast<float>(mean[i] - z * std::sqrt(variance[i] / dof));
  return out;
}

std::vector<float> ipm(std::span<const std::span<const float>> honest, const IpmConfig& config) {
  validate(AttackConfig{.kind = AttackKind::kIpm, .ipm = config});
  const std::size_t size = honest_size("ipm", honest);
  const std::vector<double> mean = honest_mean(honest, size);
  std::vector<float> out(size);
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<float>(-config.epsilon * mean[i]);
  return out;
}

std::vector<float> validator_attack(std::span<const std::span<const float>> honest,
                                    std::span<const float> reference, std::span<const TensorSlice> tensors,
                                    const ValidatorAttackConfig& config, RandomStream& rng) {
  validate(AttackConfig{.kind = AttackKind::kValidator, .validator = config});
  const std::size_t size = reference.size();
  if (size == 0) bad("validator attack: no reference vector v: pass the validator's vector in AttackInputs");
  if (!honest.empty() && honest_size("validator attack", honest) != size) {
    bad("validator attack: the honest updates have " + std::to_string(honest[0].size()) +
        " floats but v has " + std::to_string(size));
  }
  const std::vector<double> mean =
      honest.empty() ? std::vector<double>(size, 0.0) : honest_mean(honest, size);
  const std::vector<TensorSlice> layout = tensors.empty()
                                              ? std::vector<TensorSlice>{TensorSlice{0, size}}
                                              : std::vector<TensorSlice>(tensors.begin(), tensors.end());
  const double along = config.rho + config.margin;
  const double across = std::sqrt(config.norm_fraction * config.norm_bound - along * along);
  std::vector<float> out(size, 0.0f);
  for (const TensorSlice& slice : layout) {
    if (slice.offset + slice.size > size) {
      bad("validator attack: tensor at offset " + std::to_string(slice.offset) + " with " +
          std::to_string(slice.size) + " elements runs past the model's " + std::to_string(size));
    }
    const auto v = reference.subspan(slice.offset, slice.size);
    const double vv = squared_norm(v);
    if (!(vv > 0) || !std::isfinite(vv)) continue;  // nothing passes a zero v: send zeros
    // Harm: the honest mean's part orthogonal to v, reversed; a random orthogonal direction if the
    // honest mean lies along v (or is unknown).
    std::vector<double> harm(slice.size);
    double hv = 0;
    for (std::size_t i = 0; i < slice.size; ++i) hv += mean[slice.offset + i] * v[i];
    for (std::size_t i = 0; i < slice.size; ++i) harm[i] = -(mean[slice.offset + i] - hv / vv * v[i]);
    if (!(norm(harm) > 1e-9 * std::sqrt(vv))) {
      harm = gaussian_direction(slice.size, rng);
      double rv = 0;
      for (std::size_t i = 0; i < slice.size; ++i) rv += harm[i] * v[i];
      for (std::size_t i = 0; i < slice.size; ++i) harm[i] -= rv / vv * v[i];
    }
    const double harm_norm = norm(harm);
    const double harm_scale = harm_norm > 0 ? across * std::sqrt(vv) / harm_norm : 0.0;
    // u = (rho + margin) v + w, w orthogonal to v with ||u||^2 = norm_fraction * c * ||v||^2.
    for (std::size_t i = 0; i < slice.size; ++i) {
      out[slice.offset + i] = static_cast<float>(along * v[i] + harm_scale * harm[i]);
    }
  }
  return out;
}

std::vector<std::uint8_t> label_flip_map(int classes) {
  if (classes < 1 || classes > 256) {
    bad("label-flip: classes = " + std::to_string(classes) + " is invalid: use 1..256 (Fashion-MNIST: 10)");
  }
  std::vector<std::uint8_t> map(static_cast<std::size_t>(classes));
  for (int y = 0; y < classes; ++y)
    map[static_cast<std::size_t>(y)] = static_cast<std::uint8_t>(classes - 1 - y);
  return map;
}

void flip_labels(std::span<std::uint8_t> labels, int classes) {
  const std::vector<std::uint8_t> map = label_flip_map(classes);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= map.size()) {
      bad("label-flip: label " + std::to_string(labels[i]) + " at sample " + std::to_string(i) +
          " is not below classes = " + std::to_string(classes) + ": pass the data set's class count");
    }
    labels[i] = map[labels[i]];
  }
}

}  // namespace pstwin::zeno
