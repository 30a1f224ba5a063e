// workload.device: where a worker's tensors live. `Device.*` runs everywhere: the emulated device the
// simulator uses, the scenario's checks, the simulator's PCIe model, and what a CUDA build says on a
// machine without a GPU. `Cuda.*` needs a GPU (bench/gpu_check.sh runs them there) and skips without one,
// saying why: the CUDA tensors hold exactly the CPU values, and real jobs on the GPU path give the
// simulator's model and cross aggregates with legacy staging names only.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_tensors.hpp"
#include "ps/device.hpp"
#include "ps/workload.hpp"
#include "scenario/scenario.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::ChildProcess;
using testing::fresh_dir;
using testing::read_json;
using testing::run_pstwin;
using Clock = std::chrono::steady_clock;

#define SKIP_WITHOUT_CUDA_BUILD() \
  if (!built_with_cuda()) GTEST_SKIP() << "built without CUDA: workload.device = \"cuda\" is refused"

#define SKIP_WITHOUT_GPU()                                                           \
  do {                                                                               \
    const auto available = cuda::availability();                                     \
    if (available.devices == 0) GTEST_SKIP() << "no CUDA device: " << available.why; \
  } while (0)

Scenario quickstart(const std::vector<std::pair<std::string, std::string>>& overrides = {}) {
  return load_scenario(std::string(PSTWIN_SOURCE_DIR) + "/scenarios/quickstart.toml", overrides);
}

// Every partition's values as SyntheticWorkload::fill gives them.
std::vector<float> cpu_values(const SyntheticWorkload& workload, int rank, std::uint32_t iteration,
                              const PartitionSpec& partition) {
  std::vector<float> values(partition.bytes / sizeof(float));
  workload.fill(rank, iteration, partition.key, values);
  return values;
}

// produce + copy_out give fill's values in the staging buffer; copy_in + read give back the aggregate.
void expect_device_round_trip(DeviceTensors& device, const SyntheticWorkload& workload, int rank) {
  for (std::uint32_t iteration : {0u, 3u}) {
    for (const auto& partition : workload.partitions()) {
      SCOPED_TRACE("key " + std::to_string(partition.key) + ", iteration " + std::to_string(iteration));
      auto staging = std::make_shared<ByteBuffer>(partition.bytes);
      device.produce(partition, iteration);
      device.copy_out(partition, staging);
      const auto expected = cpu_values(workload, rank, iteration, partition);
      const auto staged = staging->floats();
      ASSERT_EQ(staged.size(), expected.size());
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), staged.begin()));
      std::vector<float> aggregate(expected.size());
      for (std::size_t j = 0; j < aggregate.size(); ++j)
        aggregate[j] = workload.expected_round_sum(iteration, partition.key, j);
      device.copy_in(partition, aggregate);
      EXPECT_EQ(device.read(partition), aggregate);
    }
  }
}

// ------------------------------------------------------------------ everywhere

TEST(Device, EmulatedDeviceHoldsTheCpuValuesAndTakesAggregates) {
  const Scenario sc = quickstart();
  const SyntheticWorkload workload(sc);
  EmulatedDevice device(workload, 3);
  expect_device_round_trip(device, workload, 3);
  const auto& first = workload.partitions().front();
  EXPECT_THROW(device.copy_in(first, std::vector<float>(3)), DeviceError);
  EXPECT_THROW(device.copy_out(first, std::make_shared<ByteBuffer>(4)), DeviceError);
}

TEST(Device, CudaIsRefusedWithoutACudaBuildAndOutsideTheSyntheticStagedWorkload) {
  auto error_of = [](const std::vector<std::pair<std::string, std::string>>& overrides) -> std::string {
    try {
      quickstart(overrides);
    } catch (const ScenarioError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of({{"workload.device", "cpu"}}), "");
  const std::string cuda = error_of({{"workload.device", "cuda"}});
  if (!built_with_cuda()) {
    EXPECT_NE(cuda.find("workload.device = \"cuda\""), std::string::npos) << cuda;
    EXPECT_NE(cuda.find("built without CUDA"), std::string::npos) << cuda;
    EXPECT_NE(cuda.find("-DPSTWIN_CUDA=ON"), std::string::npos) << cuda;
    return;
  }
  EXPECT_EQ(cuda, "");
  const std::string unstaged = error_of({{"workload.device", "cuda"}, {"staging.enabled", "false"}});
  EXPECT_NE(unstaged.find("workload.device"), std::string::npos) << unstaged;
  EXPECT_NE(unstaged.find("staging.enabled = true"), std::string::npos) << unstaged;
  const std::string mlp = error_of({{"workload.device", "cuda"}, {"workload.kind", "mlp"}});
  EXPECT_NE(mlp.find("workload.kind = \"synthetic\""), std::string::npos) << mlp;
  EXPECT_NE(error_of({{"workload.device", "gpu"}}).find("workload.device"), std::string::npos);
  EXPECT_EQ(quickstart().cluster.pcie_bandwidth_Bps, 12e9);
}

// One worker, one server, one 1 MB partition, no jitter: with device = "cuda" the copy lane carries the
// copy-in (device -> host) and the pulled aggregate's copy (host -> device), 1 MB each at
// cluster.pcie_bandwidth, in series with everything else, so the iteration grows by exactly 2 MB / rate
// (twice that on a node that faults.slow stretches by 2).
TEST(Device, SimChargesBothPcieCopiesOnTheCopyLane) {
  SKIP_WITHOUT_CUDA_BUILD();
  const auto dir = fresh_dir("device-pcie");
  const std::string base =
      " -q --set workload.iterations=3 --set roles.workers=1 --set roles.servers=1 "
      "--set workload.tensor_bytes=1MB --set ps.partition_bytes=1MB --set output.trace=false";
  auto mean = [&](const std::string& name, const std::string& sets) {
    const auto out = dir / name;
    const auto r = run_pstwin("sim scenarios/quickstart.toml --out " + out.string() + base + sets);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const auto results = read_json(out / "results.json");
    EXPECT_EQ(results["invariants"]["violation_count"], 0);
    return std::make_pair(results["mean_iteration_s"].get<double>(),
                          results["model_digest"].get<std::string>());
  };
  const auto cpu = mean("cpu", "");
  const auto slow = mean("slow", " --set workload.device=cuda --set cluster.pcie_bandwidth=1GBps");
  const auto fast = mean("fast", " --set workload.device=cuda --set cluster.pcie_bandwidth=1000GBps");
  EXPECT_EQ(slow.second, cpu.second);  // the same values, the same model
  EXPECT_EQ(fast.second, cpu.second);
  const double predicted = 2 * 1e6 / 1e9 - 2 * 1e6 / 1e12;
  EXPECT_NEAR(slow.first - fast.first, predicted, 0.01 * predicted);
  // A (nearly) free PCIe copy replaces the host memcpy at staging.copy_bandwidth (1 MB / 5 GB/s).
  EXPECT_NEAR(cpu.first - fast.first, 1e6 / 5e9, 0.05 * 1e6 / 5e9);
  // faults.slow stretches the worker's PCIe copies as every other task of it: at factor 2, twice the gap.
  const std::string slowed = R"( --set 'faults.slow=[{node = "worker 0", factor = 2}]')";
  const auto slow_node =
      mean("slow-node", " --set workload.device=cuda --set cluster.pcie_bandwidth=1GBps" + slowed);
  const auto fast_node =
      mean("fast-node", " --set workload.device=cuda --set cluster.pcie_bandwidth=1000GBps" + slowed);
  EXPECT_EQ(slow_node.second, cpu.second);
  EXPECT_NEAR(slow_node.first - fast_node.first, 2 * predicted, 0.02 * predicted);
}

// The race does not care where the copy-in comes from: with legacy naming the device -> host copies of
// two workers on one host land in one staging buffer as the host memcpys did; per-rank naming is clean.
TEST(Device, SimCrossedLineOnTheDevicePathDependsOnlyOnNaming) {
  SKIP_WITHOUT_CUDA_BUILD();
  const auto legacy = run_pstwin(
      "explore scenarios/crossed_line.toml --seeds 20 -q --set workload.device=cuda "
      "--set staging.naming=legacy-key-only --out " +
      fresh_dir("device-crossed").string());
  EXPECT_EQ(legacy.exit_code, 1) << legacy.output;
  EXPECT_NE(legacy.output.find("crossed line"), std::string::npos) << legacy.output;
  const auto per_rank =
      run_pstwin("explore scenarios/crossed_line.toml --seeds 40 -q --set workload.device=cuda");
  EXPECT_EQ(per_rank.exit_code, 0) << per_rank.output;
}

// A CUDA build on a machine without a GPU: the device path fails at once, naming the CUDA call.
TEST(Device, WithoutAGpuTheCudaPathFailsNamingTheCall) {
  SKIP_WITHOUT_CUDA_BUILD();
  if (cuda::availability().devices > 0) GTEST_SKIP() << "a CUDA device is present (Cuda.* tests use it)";
  const auto why = cuda::availability().why;
  EXPECT_NE(why.find("cudaGetDeviceCount"), std::string::npos) << why;
  const Scenario sc = quickstart({{"workload.device", "cuda"}});
  const SyntheticWorkload workload(sc);
  try {
    cuda::make_device_tensors(workload, 0);
    ADD_FAILURE() << "no exception";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaGetDeviceCount"), std::string::npos) << e.what();
  }
  const auto run = run_pstwin("run scenarios/quickstart.toml -q --set workload.device=cuda --out " +
                              fresh_dir("device-nogpu").string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("workload.device = \"cuda\": no CUDA device: cudaGetDeviceCount"),
            std::string::npos)
      << run.output;
}

// ------------------------------------------------------------------ on a GPU

TEST(Cuda, TensorsHoldTheCpuValuesAndTakeAggregates) {
  SKIP_WITHOUT_GPU();
  const Scenario sc = quickstart({{"workload.device", "cuda"}});
  const SyntheticWorkload workload(sc);
  for (int rank : {0, 3}) {
    const auto device = cuda::make_device_tensors(workload, rank);
    EXPECT_NE(device->describe().find("cuda:"), std::string::npos) << device->describe();
    expect_device_round_trip(*device, workload, rank);
  }
  // Two workers of one process sharing one staging buffer (legacy naming in run_local): registered once.
  const auto a = cuda::make_device_tensors(workload, 0);
  const auto b = cuda::make_device_tensors(workload, 1);
  const auto& partition = workload.partitions().back();
  auto shared = std::make_shared<ByteBuffer>(partition.bytes);
  a->produce(partition, 0);
  a->copy_out(partition, shared);
  b->produce(partition, 0);
  b->copy_out(partition, shared);
  const auto staged = shared->floats();
  const auto expected = cpu_values(workload, 1, 0, partition);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), staged.begin()));
}

// The core promise on the GPU path: sync mode, real payloads through device memory, the simulator's model.
TEST(Cuda, RealJobGivesTheSimulatorsModel) {
  SKIP_WITHOUT_GPU();
  const auto dir = fresh_dir("cuda-digest");
  const std::string sets = " -q --set workload.iterations=3 --set workload.device=cuda --out ";
  const auto sim = run_pstwin("sim scenarios/quickstart.toml" + sets + (dir / "sim").string());
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  const auto run = run_pstwin("run scenarios/quickstart.toml" + sets + (dir / "run").string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto s = read_json(dir / "sim" / "results.json");
  const auto r = read_json(dir / "run" / "results.json");
  EXPECT_EQ(r["invariants"]["violation_count"], 0);
  EXPECT_FALSE(s["model_digest"].get<std::string>().empty());
  EXPECT_EQ(r["model_digest"], s["model_digest"]);
}

// Crossed aggregates of `pstwin run scenarios/crossed_line.toml` on the GPU path with `naming`, 30
// iterations without compute jitter (the workers copy in lock-step); legacy naming retries a clean run
// twice, as tests/test_run.cpp does on the host path.
std::optional<std::uint64_t> crossed_on_gpu(const std::string& naming, int attempts) {
  const auto dir = fresh_dir("cuda-crossed-" + naming);
  for (int attempt = 0; attempt < attempts; ++attempt) {
    const auto out = dir / std::to_string(attempt);
    ChildProcess run({"run", "scenarios/crossed_line.toml", "-q", "--out", out.string(), "--set",
                      "workload.device=cuda", "--set", "staging.naming=" + naming, "--set",
                      "perturbation.compute_jitter=0ms", "--set", "workload.iterations=30"},
                     dir / ("log" + std::to_string(attempt)));
    const auto status = run.wait_until(Clock::now() + std::chrono::seconds(90));
    EXPECT_TRUE(status == 0 || status == 1) << run.output();
    if (status != 0 && status != 1) return std::nullopt;
    const auto r = read_json(out / "results.json");
    EXPECT_TRUE(r["completed"].get<bool>()) << run.output();
    const auto& aggregates = r["invariants"]["by_invariant"]["aggregates"];
    EXPECT_EQ(aggregates["checked"], 120);
    const auto violated = aggregates["violated"].get<std::uint64_t>();
    if (violated > 0) return violated;
  }
  return 0;
}

TEST(Cuda, CrossedLineLegacyNamingCrossesOnTheGpuPath) {
  SKIP_WITHOUT_GPU();
  const auto crossed = crossed_on_gpu("legacy-key-only", 3);
  ASSERT_TRUE(crossed);
  EXPECT_GT(*crossed, 0u) << "legacy-key-only staging crossed no aggregate in 3 runs of 30 iterations";
}

TEST(Cuda, CrossedLinePerRankNamingIsCleanOnTheGpuPath) {
  SKIP_WITHOUT_GPU();
  const auto crossed = crossed_on_gpu("per-rank", 1);
  ASSERT_TRUE(crossed);
  EXPECT_EQ(*crossed, 0u);
}

}  // namespace
}  // namespace pstwin
