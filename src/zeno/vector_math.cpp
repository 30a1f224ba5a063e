#include "zeno/vector_math.hpp"

#include <array>
#include <stdexcept>
#include <string>

#include "core/clones.hpp"

namespace pstwin::zeno {

namespace {

constexpr std::size_t kLanes = 8;

void check_sizes(const char* what, std::size_t a, std::size_t b) {
  if (a != b) {
    throw std::invalid_argument(std::string(what) + ": the two vectors differ in size (" + std::to_string(a) +
                                " and " + std::to_string(b) + " floats)");
  }
}

double fold(const std::array<double, kLanes>& lanes) {
  double total = 0;
  for (const double lane : lanes) total += lane;
  return total;
}

// One kernel for all four reductions: the lane layout is the determinism contract, so it lives once.
// target_clones: GCC vectorises the fixed lanes per clone (AVX2, baseline SSE2); same bits either way.
enum class Kind { kMoments, kDot, kNorm, kDistance };

template <Kind kKind>
PSTWIN_AVX2_CLONES Moments reduce(const float* u, const float* v, std::size_t n) {
  std::array<double, kLanes> uv{}, uu{}, vv{};
  const auto step = [&](std::size_t i, std::size_t lane) {
    const double a = u[i];
    if constexpr (kKind == Kind::kNorm) {
      uu[lane] += a * a;
    } else if constexpr (kKind == Kind::kDistance) {
      const double d = a - static_cast<double>(v[i]);
      uu[lane] += d * d;
    } else {
      const double b = v[i];
      uv[lane] += a * b;
      if constexpr (kKind == Kind::kMoments) {
        uu[lane] += a * a;
        vv[lane] += b * b;
      }
    }
  };
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::size_t lane = 0; lane < kLanes; ++lane) step(i + lane, lane);
  }
  for (; i < n; ++i) step(i, i % kLanes);
  return {fold(uv), fold(uu), fold(vv)};
}

}  // namespace

Moments moments(std::span<const float> u, std::span<const float> v) {
  check_sizes("moments", u.size(), v.size());
  return reduce<Kind::kMoments>(u.data(), v.data(), u.size());
}

double dot(std::span<const float> a, std::span<const float> b) {
  check_sizes("dot", a.size(), b.size());
  return reduce<Kind::kDot>(a.data(), b.data(), a.size()).uv;
}

double squared_norm(std::span<const float> a) {
  return reduce<Kind::kNorm>(a.data(), nullptr, a.size()).uu;
}

double squared_distance(std::span<const float> a, std::span<const float> b) {
  check_sizes("squared_distance", a.size(), b.size());
  return reduce<Kind::kDistance>(a.data(), b.data(), a.size()).uu;
}

std::vector<float> weighted_sum(std::span<const std::span<const float>> vectors,
                                std::span<const double> weights, std::size_t size) {
  check_sizes("weighted_sum (vectors vs weights)", vectors.size(), weights.size());
  std::vector<double> acc(size, 0.0);
  for (std::size_t c = 0; c < vectors.size(); ++c) {
    if (weights[c] == 0) continue;
    check_sizes("weighted_sum", vectors[c].size(), size);
    const double w = weights[c];
    const float* x = vectors[c].data();
    for (std::size_t i = 0; i < size; ++i) acc[i] += w * x[i];
  }
  return {acc.begin(), acc.end()};
}

}  // namespace pstwin::zeno
