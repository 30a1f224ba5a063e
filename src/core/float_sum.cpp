#include "core/float_sum.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>

#include "core/clones.hpp"

namespace pstwin {

namespace {

// A plain loop: GCC vectorises it per clone (AVX2 and baseline SSE2), and the ifunc resolver picks the
// clone once at load time. No __restrict: GCC adds a cheap runtime overlap check instead, so aliasing
// callers (dst == src) stay correct.
PSTWIN_AVX2_CLONES void sum_kernel(float* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

void sum_into(std::span<float> dst, std::span<const float> src) {
  if (dst.size() != src.size()) {
    throw std::invalid_argument("sum_into: destination has " + std::to_string(dst.size()) +
                                " floats, source has " + std::to_string(src.size()));
  }
  sum_kernel(dst.data(), src.data(), dst.size());
}

}  // namespace pstwin
