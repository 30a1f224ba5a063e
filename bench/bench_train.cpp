// Training step throughput on real Fashion-MNIST: what one worker's iteration costs on this host,
// which calibrates the simulator's cost model (FLOPs per sample x host speed). The `FLOP/s` counter
// uses the model's own FLOP count (Mlp::train_flops_per_sample), the one the simulator charges.
#include <benchmark/benchmark.h>

#include <vector>

#include "core/random.hpp"
#include "train/idx_dataset.hpp"
#include "train/mlp.hpp"
#include "train/sgd.hpp"
#include "train/shard_trainer.hpp"
#include "train/sharding.hpp"

namespace pstwin::train {
namespace {

std::vector<float> initial_params(const Mlp& model) {
  std::vector<float> params(model.parameter_count());
  RandomStream init(1, "train.init");
  model.initialize(params, init);
  return params;
}

// One worker iteration: next minibatch, gather, forward, backward (no optimizer step).
void BM_TrainStep(benchmark::State& state) {
  const Mlp model;
  const auto batch = static_cast<std::size_t>(state.range(0));
  const ShardSet shards = make_shards(shared_fashion_mnist(Split::kTrain).labels(), kFashionMnistClasses,
                                      {.workers = 1, .seed = 1});
  ShardTrainer trainer(model, shared_fashion_mnist(Split::kTrain), shards.workers[0], batch,
                       RandomStream(1, "train.batches", 0));
  std::vector<float> params = initial_params(model), grad(params.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(trainer.step(params, grad));
    benchmark::ClobberMemory();
  }
  const auto steps = static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.counters["FLOP/s"] =
      benchmark::Counter(steps * trainer.flops_per_step(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TrainStep)->Arg(32)->Arg(64)->Arg(128)->Unit(benchmark::kMillisecond);

// A step plus SGD on the whole model, as a single-process trainer does it.
void BM_TrainStepWithSgd(benchmark::State& state) {
  const Mlp model;
  const ShardSet shards = make_shards(shared_fashion_mnist(Split::kTrain).labels(), kFashionMnistClasses,
                                      {.workers = 1, .seed = 1});
  ShardTrainer trainer(model, shared_fashion_mnist(Split::kTrain), shards.workers[0], 64,
                       RandomStream(1, "train.batches", 0));
  std::vector<float> params = initial_params(model), grad(params.size()), velocity(params.size());
  const SgdConfig sgd{.learning_rate = 0.02f, .momentum = 0.9f, .weight_decay = 1e-4f};
  for (auto _ : state) {
    trainer.step(params, grad);
    sgd_step(params, grad, velocity, sgd);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_TrainStepWithSgd)->Unit(benchmark::kMillisecond);

// The optimizer alone over the 235,146 parameters (reads params, grad, velocity; writes two).
void BM_SgdStep(benchmark::State& state) {
  const Mlp model;
  std::vector<float> params = initial_params(model), grad(params.size(), 1e-3f), velocity(params.size());
  const SgdConfig sgd{.learning_rate = 0.02f, .momentum = 0.9f, .weight_decay = 1e-4f};
  for (auto _ : state) {
    sgd_step(params, grad, velocity, sgd);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(params.size() * sizeof(float)));
}
BENCHMARK(BM_SgdStep)->Unit(benchmark::kMicrosecond);

// Test accuracy over the 10,000 test images (what each accuracy-curve point costs).
void BM_EvaluateTestSet(benchmark::State& state) {
  const Mlp model;
  const std::vector<float> params = initial_params(model);
  MlpWorkspace ws = model.workspace(500);
  for (auto _ : state)
    benchmark::DoNotOptimize(model.evaluate(params, shared_fashion_mnist(Split::kTest), ws));
  state.SetItemsProcessed(state.iterations() *
                          static_cast<std::int64_t>(shared_fashion_mnist(Split::kTest).size()));
}
BENCHMARK(BM_EvaluateTestSet)->Unit(benchmark::kMillisecond);

// Loading the 60,000 training images: gunzip, checks, bytes to float32.
void BM_LoadTrainSet(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(load_fashion_mnist(Split::kTrain).size());
}
BENCHMARK(BM_LoadTrainSet)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace pstwin::train
