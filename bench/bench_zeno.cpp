// Validator cost per update: ZenoPS scoring throughput in GB/s of update (bytes of u scored per second;
// v is read alongside), for a 1 MB, a 16 MB and a whole-MLP (784-256-128-10, 0.94 MB) update, and the
// robust baselines (Krum, coordinate-wise median) over 8 candidates of the MLP's size.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/random.hpp"
#include "train/mlp.hpp"
#include "zeno/rules.hpp"
#include "zeno/vector_math.hpp"

namespace pstwin::zeno {
namespace {

std::vector<float> random_vector(std::size_t size, std::uint64_t salt) {
  RandomStream rng(1, "bench.zeno", salt);
  std::vector<float> v(size);
  for (float& x : v) x = static_cast<float>(rng.normal(0.0, 1.0));
  return v;
}

std::size_t mlp_size() {
  return train::Mlp().parameter_count();
}

std::vector<TensorSlice> mlp_layout() {
  std::vector<TensorSlice> layout;
  for (const train::TensorInfo& t : train::Mlp().tensors()) layout.push_back({t.offset, t.size()});
  return layout;
}

// Sizes in floats: 1 MB, 16 MB, and 0 standing for the whole MLP.
std::size_t floats_for(std::int64_t arg) {
  return arg == 0 ? mlp_size() : static_cast<std::size_t>(arg) / sizeof(float);
}

// The score itself: <u,v>, ||u||^2, ||v||^2 in one pass (what ZenoPS and Zeno++ decide on).
void BM_ZenoPsScore(benchmark::State& state) {
  const std::size_t size = floats_for(state.range(0));
  const std::vector<float> u = random_vector(size, 1), v = random_vector(size, 2);
  for (auto _ : state) benchmark::DoNotOptimize(moments(u, v));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(size * sizeof(float)));
}
BENCHMARK(BM_ZenoPsScore)->Arg(1 << 20)->Arg(16 << 20)->Arg(0);

// The whole validator decision for 8 candidates: score each (per tensor on the MLP's layout), average
// the accepted. Bytes: all 8 candidates.
void BM_ZenoPsValidate8(benchmark::State& state) {
  const std::size_t size = floats_for(state.range(0));
  const std::vector<float> v = random_vector(size, 2);
  std::vector<std::vector<float>> candidates;
  for (std::uint64_t c = 0; c < 8; ++c) candidates.push_back(random_vector(size, 10 + c));
  const std::vector<std::span<const float>> views(candidates.begin(), candidates.end());
  const std::vector<TensorSlice> layout = state.range(0) == 0 ? mlp_layout() : std::vector<TensorSlice>{};
  const ZenoPsConfig config{.rho = -1.0, .norm_bound = 4.0};  // random u: accept all, so the average runs
  for (auto _ : state) benchmark::DoNotOptimize(zenops(views, v, layout, config));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(8 * size * sizeof(float)));
}
BENCHMARK(BM_ZenoPsValidate8)->Arg(1 << 20)->Arg(0)->Unit(benchmark::kMillisecond);

template <typename Rule>
void run_baseline(benchmark::State& state, Rule rule) {
  const std::size_t size = mlp_size();
  std::vector<std::vector<float>> candidates;
  for (std::uint64_t c = 0; c < 8; ++c) candidates.push_back(random_vector(size, 10 + c));
  const std::vector<std::span<const float>> views(candidates.begin(), candidates.end());
  for (auto _ : state) benchmark::DoNotOptimize(rule(views));
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(8 * size * sizeof(float)));
}

void BM_Krum8(benchmark::State& state) {
  run_baseline(state, [](Candidates c) { return krum(c, KrumConfig{.byzantine = 2}, false); });
}
BENCHMARK(BM_Krum8)->Unit(benchmark::kMillisecond);

void BM_Median8(benchmark::State& state) {
  run_baseline(state, [](Candidates c) { return coordinate_median(c); });
}
BENCHMARK(BM_Median8)->Unit(benchmark::kMillisecond);

void BM_Mean8(benchmark::State& state) {
  run_baseline(state, [](Candidates c) { return mean(c); });
}
BENCHMARK(BM_Mean8)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace pstwin::zeno
