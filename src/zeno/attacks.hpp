// Byzantine attacks as transforms of one worker's update. Who attacks (a fixed set of workers, or each
// message with probability p) is the caller's decision; these functions only compute what an attacker
// sends. Every random draw comes from the RandomStream passed in (attack_stream gives the standard one),
// so the same scenario seed gives the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/random.hpp"
#include "zeno/config_support.hpp"
#include "zeno/rules.hpp"

namespace pstwin::zeno {

enum class AttackKind {
  kNone,
  kSignFlip,     // -scale * u
  kGaussian,     // N(0, sigma^2) per element, in place of u (ZenoPS: N(0, 1))
  kNormMatched,  // a uniformly random direction with norm scale * ||u|| (ZenoPS: x8)
  kLabelFlip,    // data attack: label -> classes - 1 - label before the gradient (see label_flip_map)
  kBitFlip,      // flip the given bits of round(rate * size) distinct random elements
  kAlie,         // "a little is enough" (Baruch et al. 2019): mean - z * std of the honest updates
  kIpm,          // inner-product manipulation (Xie et al. 2020): -epsilon * mean of the honest updates
  kValidator,    // aimed at ZenoPS's validator: passes <u,v> > rho ||v||^2 narrowly, harm orthogonal to v
};

using AttackInfo = Named<AttackKind>;
std::span<const AttackInfo> attack_infos();
// Throws std::invalid_argument naming the value and listing every valid name.
AttackKind parse_attack(std::string_view name);

struct SignFlipConfig {
  double scale = 4.0;  // > 0 (ZenoPS: 6 sync, 2 async)
};
struct GaussianConfig {
  double sigma = 1.0;  // > 0
};
struct NormMatchedConfig {
  double scale = 1.0;  // > 0: the attack's norm over the honest update's (ZenoPS: 8)
};
struct BitFlipConfig {
  double rate = 0.001;           // share of elements corrupted, in [0, 1]
  std::vector<int> bits = {30};  // distinct IEEE-754 bit positions 0..31 (31 sign, 30 exponent top)
};
struct AlieConfig {
  std::size_t workers = 0;    // n, all workers (honest and Byzantine)
  std::size_t byzantine = 0;  // f, 1 <= f <= n / 2
  double z = 0;               // > 0 overrides; 0: from n and f as in the paper (alie_z)
};
struct IpmConfig {
  double epsilon = 0.1;  // > 0 (Xie et al.: 0.1 against Krum/median, large values against mean)
};
struct ValidatorAttackConfig {
  double rho = 0.0;            // the validator's rho (the attacker is assumed to know it)
  double norm_bound = 1.6;     // the validator's c
  double margin = 0.01;        // <u,v> = (rho + margin) ||v||^2: how narrowly it passes (> 0)
  double norm_fraction = 0.5;  // ||u||^2 = norm_fraction * c * ||v||^2, in (0, 1)
};

struct AttackConfig {
  AttackKind kind = AttackKind::kNone;
  SignFlipConfig sign_flip{};
  GaussianConfig gaussian{};
  NormMatchedConfig norm_matched{};
  BitFlipConfig bit_flip{};
  AlieConfig alie{};
  IpmConfig ipm{};
  ValidatorAttackConfig validator{};
};

// Checks the fields the selected attack reads; std::invalid_argument naming the field, value and fix.
void validate(const AttackConfig& config);

// What an attacker may look at (omniscient attacks read the honest updates of the round).
struct AttackInputs {
  std::span<const float> own{};                      // the update this worker computed honestly
  std::span<const std::span<const float>> honest{};  // the honest updates of the round (ALIE, IPM, validator)
  std::span<const float> reference{};                // v, the validator's vector (validator attack)
  std::span<const TensorSlice> tensors{};            // validator attack: pass per tensor (empty: whole model)
};

// The update the attacker sends instead of `own`. kNone returns `own` unchanged; kLabelFlip is a data
// attack and throws (flip the labels before the gradient instead: label_flip_map).
std::vector<float> apply_attack(const AttackConfig& config, const AttackInputs& inputs, RandomStream& rng);

// The standard stream for one poisoned message: purpose "zeno.attack", salted by (round, worker).
RandomStream attack_stream(std::uint64_t seed, std::uint64_t round, std::uint32_t worker);

// The attacks one by one.
std::vector<float> sign_flip(std::span<const float> own, const SignFlipConfig& config);
std::vector<float> gaussian(std::size_t size, const GaussianConfig& config, RandomStream& rng);
std::vector<float> norm_matched(std::span<const float> own, const NormMatchedConfig& config,
                                RandomStream& rng);
std::vector<float> bit_flip(std::span<const float> own, const BitFlipConfig& config, RandomStream& rng);
std::size_t bit_flip_count(std::size_t size, double rate);  // round(rate * size)
std::vector<float> alie(std::span<const std::span<const float>> honest, const AlieConfig& config);
double alie_z(std::size_t workers, std::size_t byzantine);  // Phi^-1((n - s) / n), s = floor(n/2 + 1) - f
std::vector<float> ipm(std::span<const std::span<const float>> honest, const IpmConfig& config);
std::vector<float> validator_attack(std::span<const std::span<const float>> honest,
                                    std::span<const float> reference, std::span<const TensorSlice> tensors,
                                    const ValidatorAttackConfig& config, RandomStream& rng);

// Label map for ShardTrainer::set_label_map: label -> classes - 1 - label (9 - label for 10 classes).
std::vector<std::uint8_t> label_flip_map(int classes = 10);
// The same in place on a batch's labels; throws if a label is not below `classes`.
void flip_labels(std::span<std::uint8_t> labels, int classes = 10);

}  // namespace pstwin::zeno
