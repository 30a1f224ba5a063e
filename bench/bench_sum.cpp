// The server's reduction kernel against memcpy in the same binary: both report dst bytes per second,
// so BM_SumInto's GB/s reads directly as a fraction of copy bandwidth (sum_into moves 3 streams, memcpy 2).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "core/float_sum.hpp"
#include "core/payload.hpp"

namespace {

using namespace pstwin;

void fill(ByteBuffer& buffer, float value) {
  for (float& f : buffer.floats()) f = value;
}

void BM_SumInto(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  ByteBuffer dst(bytes), src(bytes);
  fill(dst, 0.0f);
  fill(src, 1.0f);
  for (auto _ : state) {
    sum_into(dst.floats(), std::as_const(src).floats());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_SumInto)->ArgName("bytes")->Arg(4 << 10)->Arg(1 << 20)->Arg(16 << 20);

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  ByteBuffer dst(bytes), src(bytes);
  fill(src, 1.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_Memcpy)->ArgName("bytes")->Arg(4 << 10)->Arg(1 << 20)->Arg(16 << 20);

}  // namespace
