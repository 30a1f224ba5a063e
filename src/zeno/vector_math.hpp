// Deterministic reductions over float32 vectors: the validator's inner loops. Every sum is accumulated
// in double over 8 fixed lanes (element i goes to lane i % 8) and the lanes are added in order 0..7,
// so a result depends only on the inputs, never on the CPU's vector width. (A float*float product is
// exact in double, so a fused multiply-add gives the same bits as a separate multiply and add.)
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace pstwin::zeno {

// <u,v>, ||u||^2, ||v||^2 in one pass over both vectors.
struct Moments {
  double uv = 0;
  double uu = 0;
  double vv = 0;
};

// Every function here throws std::invalid_argument when the two sizes differ.
Moments moments(std::span<const float> u, std::span<const float> v);
double dot(std::span<const float> a, std::span<const float> b);
double squared_norm(std::span<const float> a);
double squared_distance(std::span<const float> a, std::span<const float> b);

// sum_i weights[i] * vectors[i], accumulated per element in double in candidate order. A zero weight
// skips its vector entirely, so a rejected candidate's NaN or Inf never reaches the result.
std::vector<float> weighted_sum(std::span<const std::span<const float>> vectors,
                                std::span<const double> weights, std::size_t size);

}  // namespace pstwin::zeno
