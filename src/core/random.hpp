// Deterministic random streams. Every stream is derived from (scenario seed, node, purpose), so
// adding a new stream never shifts the numbers another stream draws.
#pragma once

#include <cstdint>
#include <string_view>

namespace pstwin {

class RandomStream {
 public:
  RandomStream(std::uint64_t seed, std::string_view purpose, std::uint64_t salt = 0);

  std::uint64_t next_u64();
  double uniform01();                        // [0, 1)
  double uniform(double low, double high);   // [low, high)
  std::uint64_t below(std::uint64_t bound);  // [0, bound), bound > 0
  double normal(double mean, double stddev);

 private:
  std::uint64_t state_[4];
};

std::uint64_t fnv1a64(std::string_view text, std::uint64_t hash = 0xcbf29ce484222325ULL);

}  // namespace pstwin
