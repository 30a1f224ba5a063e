// Vectorised float32 summation, the server's inner loop (BytePS's SUM_RECV).
#pragma once

#include <span>

namespace pstwin {

// dst[i] += src[i]; sizes must match. Runs AVX2 where the CPU has it, SSE2 otherwise.
void sum_into(std::span<float> dst, std::span<const float> src);

}  // namespace pstwin
