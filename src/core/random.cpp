// Exact definition (so another implementation can reproduce every stream):
//   mix(z)      = SplitMix64 finaliser: z = (z ^ z>>30) * 0xbf58476d1ce4e5b9; z = (z ^ z>>27) *
//   0x94d049bb133111eb;
//                 z ^ z>>31
//   key         = mix(mix(mix(seed + G) ^ fnv1a64(purpose)) ^ salt), with G = 0x9e3779b97f4a7c15
//   state[i]    = the i-th output (i = 0..3) of a SplitMix64 generator whose state starts at key
//                 (each output: s += G; return mix(s))
//   next_u64    = xoshiro256** (Blackman & Vigna 2018)
//   uniform01   = (next_u64() >> 11) * 2^-53
//   below(b)    = rejection: draw r until r >= (2^64 - b) mod b, return r mod b
//   normal      = Box-Muller cosine branch with u1 = 1 - uniform01(), u2 = uniform01() (2 draws per call)
#include "core/random.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace pstwin {

namespace {

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

constexpr std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr std::uint64_t rotl(std::uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

}  // namespace

std::uint64_t fnv1a64(std::string_view text, std::uint64_t hash) {
  for (const char c : text) {
    hash ^= static_cast<std::uint8_t>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

RandomStream::RandomStream(std::uint64_t seed, std::string_view purpose, std::uint64_t salt) {
  // Chained mixing (not a plain XOR of the three inputs) so that e.g. (seed, salt) swaps differ.
  std::uint64_t s = mix(mix(mix(seed + kGolden) ^ fnv1a64(purpose)) ^ salt);
  for (auto& word : state_) {
    s += kGolden;
    word = mix(s);
  }
  // xoshiro must not start all-zero; SplitMix64 outputs practically never are, but be exact.
  if ((state_[0] | state_[1] | state_[2] | state_[3]) == 0) state_[0] = kGolden;
}

std::uint64_t RandomStream::next_u64() {
  const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double RandomStream::uniform01() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

double RandomStream::uniform(double low, double high) {
  const double r = low + (high - low) * uniform01();
  // Rounding can land exactly on `high`; keep the half-open promise.
  return (r < high || !(low < high)) ? r : std::nextafter(high, low);
}

std::uint64_t RandomStream::below(std::uint64_t bound) {
  if (bound == 0) throw std::invalid_argument("RandomStream::below: bound must be > 0");
  // Values under `threshold` would over-represent small residues; rejecting them is unbiased.
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = next_u64();
    if (r >= threshold) return r % bound;
  }
}

double RandomStream::normal(double mean, double stddev) {
  const double u1 = 1.0 - uniform01();  // (0, 1]: log is finite
  const double u2 = uniform01();
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return mean + stddev * z;
}

}  // namespace pstwin
