// workload.device: where a worker's tensors live. `Device.*` runs everywhere: the emulated device the
// simulator uses (and its groups for ps.local_reduce = "nccl"), the scenario's checks, the simulator's
// PCIe model, and what a CUDA build says on a machine without a GPU. `Cuda.*` needs a GPU
// (bench/gpu_check.sh runs them there) and skips without one, saying why: the CUDA tensors hold exactly
// the CPU values, real jobs on the GPU path give the simulator's model and cross aggregates with legacy
// staging names only, and the NCCL group sums and broadcasts exactly (one rank on one GPU; two ranks and
// a real "nccl" job need two GPUs, since NCCL refuses two ranks of one communicator on one GPU), and the
// MLP step on the GPU (workload.kind = "mlp") computes the CPU's loss and gradient within float
// tolerance and trains a real job to the CPU's accuracy.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/random.hpp"
#include "cuda/cuda_tensors.hpp"
#include "harness.hpp"
#include "ps/device.hpp"
#include "ps/observer.hpp"
#include "ps/workload.hpp"
#include "scenario/scenario.hpp"
#include "sim_support.hpp"
#include "train/mlp.hpp"
#include "zeno/roles.hpp"

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

// ps.local_reduce = "nccl" on GPUs: a build with NCCL and `gpus` CUDA devices at least.
#define SKIP_WITHOUT_NCCL_GPUS(gpus)                                                                     \
  do {                                                                                                   \
    if (!built_with_nccl()) GTEST_SKIP() << "built without NCCL: ps.local_reduce = \"nccl\" is refused"; \
    const auto available = cuda::availability();                                                         \
    if (available.devices == 0) GTEST_SKIP() << "no CUDA device: " << available.why;                     \
    if (available.devices < (gpus))                                                                      \
      GTEST_SKIP() << "needs " << (gpus) << " GPUs and this machine has " << available.devices           \
                   << ": NCCL refuses two ranks of one communicator on one GPU";                         \
  } while (0)

Scenario quickstart(const std::vector<std::pair<std::string, std::string>>& overrides = {}) {
  return load_scenario(std::string(PSTWIN_SOURCE_DIR) + "/scenarios/quickstart.toml", overrides);
}

Scenario mlp_quick(const std::vector<std::pair<std::string, std::string>>& overrides = {}) {
  return load_scenario(std::string(PSTWIN_SOURCE_DIR) + "/scenarios/mlp_quick.toml", overrides);
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

TEST(Device, CudaIsRefusedWithoutACudaBuildAndForUnstagedSyntheticTensors) {
  auto error_of = [](const std::vector<std::pair<std::string, std::string>>& overrides,
                     bool mlp = false) -> std::string {
    try {
      mlp ? mlp_quick(overrides) : quickstart(overrides);
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
  // The MLP computes its step on the GPU and pushes from host memory: staged or not.
  EXPECT_EQ(error_of({{"workload.device", "cuda"}}, true), "");
  EXPECT_EQ(error_of({{"workload.device", "cuda"}, {"staging.enabled", "false"}}, true), "");
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
  try {
    cuda::make_mlp_step(std::vector<std::size_t>{784, 256, 128, 10}, 64, 0);
    ADD_FAILURE() << "no exception";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaGetDeviceCount"), std::string::npos) << e.what();
  }
  for (const std::string scenario : {"quickstart", "mlp_quick"}) {
    const auto run = run_pstwin("run scenarios/" + scenario + ".toml -q --set workload.device=cuda --out " +
                                fresh_dir("device-nogpu-" + scenario).string());
    EXPECT_EQ(run.exit_code, 2) << run.output;
    EXPECT_NE(run.output.find("workload.device = \"cuda\": no CUDA device: cudaGetDeviceCount"),
              std::string::npos)
        << run.output;
  }
}

// What every process of `pstwin ARGS` loaded, at start or by dlopen, as ld.so itself records it
// (LD_DEBUG=files, a file per process: the command and every node it starts).
struct LoadRecord {
  testing::CommandResult run;
  int processes = 0;
  std::set<std::string> objects;  // file names: "libzmq.so.5", "libpstwin_cuda.so"
};

LoadRecord record_loads(const std::string& args, const std::filesystem::path& dir) {
  LoadRecord record;
  const auto logs = dir / "ld";
  std::filesystem::create_directories(logs);
  record.run = testing::run_shell("LD_DEBUG=files LD_DEBUG_OUTPUT=" + (logs / "ld").string() +
                                  " " PSTWIN_BINARY " " + args);
  const std::regex loaded(R"(file=(\S+) \[\d+\];\s+(needed by|dynamically loaded by))");
  for (const auto& entry : std::filesystem::directory_iterator(logs)) {
    ++record.processes;
    std::ifstream in(entry.path());
    std::smatch match;
    for (std::string line; std::getline(in, line);)
      if (std::regex_search(line, match, loaded))
        record.objects.insert(std::filesystem::path(match[1].str()).filename().string());
  }
  return record;
}

std::vector<std::string> cuda_objects(const LoadRecord& record) {
  std::vector<std::string> found;
  for (const auto& name : record.objects)
    if (name.find("cuda") != std::string::npos || name.find("cublas") != std::string::npos ||
        name.find("nccl") != std::string::npos)
      found.push_back(name);
  return found;
}

// libcudart, cuBLAS and NCCL come with the CUDA module (cuda/cuda_module.hpp), which only the device path
// opens: a CPU job's processes never load them. In a CUDA build the same job on "cuda" shows that the
// record sees the module when it is loaded.
TEST(Device, ACpuJobNeverLoadsTheCudaLibraries) {
  const auto dir = fresh_dir("device-cpu-loads");
  const auto cpu =
      record_loads("run scenarios/quickstart.toml -q --out " + (dir / "cpu-out").string(), dir / "cpu");
  ASSERT_EQ(cpu.run.exit_code, 0) << cpu.run.output;
  EXPECT_GE(cpu.processes, 8) << "pstwin run and its 7 nodes each leave a record";
  EXPECT_TRUE(cpu.objects.contains("libzmq.so.5")) << "the record names what every pstwin links";
  EXPECT_EQ(cuda_objects(cpu), std::vector<std::string>{}) << "a CPU job loaded CUDA libraries";
  if (!built_with_cuda()) return;
  const auto gpu = record_loads(
      "run scenarios/quickstart.toml -q --set workload.device=cuda --out " + (dir / "gpu-out").string(),
      dir / "gpu");
  EXPECT_TRUE(gpu.run.exit_code == 0 || gpu.run.exit_code == 2) << gpu.run.output;  // 2: no GPU here
  const auto loaded = cuda_objects(gpu);
  for (const std::string name : {"libpstwin_cuda.so", "libcudart.so.13"})
    EXPECT_NE(std::find(loaded.begin(), loaded.end(), name), loaded.end()) << name << " not in the record";
}

// The module where an installed pstwin looks first is not a shared object: the device path is refused
// naming the field, the module, dlopen's reason and the fix, with exit 2.
TEST(Device, ACudaModuleThatDoesNotLoadIsRefusedNamingItAndTheFix) {
  SKIP_WITHOUT_CUDA_BUILD();
  const auto dir = fresh_dir("device-broken-module");
  // An installed tree's binary: a hard link, so that /proc/self/exe names this path (a copy where the
  // temporary directory is on another file system).
  const auto bin = dir / "bin" / "pstwin";
  std::filesystem::create_directories(bin.parent_path());
  std::error_code error;
  std::filesystem::create_hard_link(PSTWIN_BINARY, bin, error);
  if (error) std::filesystem::copy_file(PSTWIN_BINARY, bin);
  const auto module = (bin.parent_path() / PSTWIN_CUDA_MODULE_FROM_BIN).lexically_normal();
  std::filesystem::create_directories(module.parent_path());
  std::ofstream(module) << "not a shared object\n";
  const auto run = testing::run_shell(bin.string() +
                                      " run scenarios/quickstart.toml -q --set workload.device=cuda --out " +
                                      (dir / "out").string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  for (const std::string& part :
       {std::string("workload.device = \"cuda\""), "cannot load the CUDA module " + module.string() + ": ",
        std::string("cmake --install"), std::string("workload.device = \"cpu\"")})
    EXPECT_NE(run.output.find(part), std::string::npos) << part << "\n" << run.output;
}

// workload.kind = "mlp" on "cuda" in the simulator: the CPU computes the step (the model is the CPU
// run's, bit for bit) and each round's training step also pays its PCIe copies (parameters and batch
// in, gradient out, at cluster.pcie_bandwidth), so the run takes longer.
TEST(Device, SimMlpOnCudaLearnsTheCpuModelAndPaysTheCopies) {
  SKIP_WITHOUT_CUDA_BUILD();
  const auto dir = fresh_dir("device-sim-mlp");
  const std::string sets = " -q --set workload.iterations=20 --set train.eval_every=10 --out ";
  const auto cpu = run_pstwin("sim scenarios/mlp_quick.toml" + sets + (dir / "cpu").string());
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  const auto gpu =
      run_pstwin("sim scenarios/mlp_quick.toml --set workload.device=cuda" + sets + (dir / "gpu").string());
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  const auto c = read_json(dir / "cpu" / "results.json");
  const auto g = read_json(dir / "gpu" / "results.json");
  EXPECT_FALSE(c["model_digest"].get<std::string>().empty());
  EXPECT_EQ(g["model_digest"], c["model_digest"]);
  EXPECT_EQ(g["accuracy"]["final"], c["accuracy"]["final"]);
  EXPECT_EQ(g["invariants"]["violation_count"], 0);
  // 20 rounds x (2 x 0.94 MB of parameters and gradient + 64 x 3141 B of batch) at 12 GB/s: ~3.5 ms.
  const double cpu_time = c["accuracy"]["curve"].back()["time_s"].get<double>();
  const double gpu_time = g["accuracy"]["curve"].back()["time_s"].get<double>();
  EXPECT_GT(gpu_time, cpu_time + 0.003) << cpu_time << " s on the CPU, " << gpu_time << " s on the GPU";
}

// The simulator's groups: the root's reduce sums every member's values by member into its sum buffer,
// every member's broadcast takes that buffer, and misuse is a DeviceError, not a crash.
TEST(Device, EmulatedGroupSumsByMemberAndBroadcastsTheRootsSum) {
  const Scenario sc = quickstart();
  const SyntheticWorkload workload(sc);
  auto groups = std::make_shared<EmulatedGroups>();
  EmulatedDevice d0(workload, 0, groups), d1(workload, 1, groups), d2(workload, 2, groups);
  const auto id = d0.new_group_id();
  EXPECT_EQ(id.size(), kDeviceGroupIdBytes);
  EXPECT_NE(d0.new_group_id(), id);  // a new group each time
  auto g0 = d0.join_group(id, 0, 3);
  auto g1 = d1.join_group(id, 1, 3);
  EXPECT_THROW(d2.join_group(id, 1, 3), DeviceError);  // member 1 joined already
  EXPECT_THROW(d2.join_group(id, 2, 4), DeviceError);  // another size
  const auto& partition = workload.partitions().front();
  for (auto* device : {&d0, &d1, &d2}) device->produce(partition, 2);
  try {
    g0->reduce(partition);
    ADD_FAILURE() << "reduced without member 2";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("member 2 of the group has not joined"), std::string::npos)
        << e.what();
  }
  auto g2 = d2.join_group(id, 2, 3);
  for (auto* group : {g2.get(), g1.get(), g0.get()}) group->reduce(partition);  // any order
  auto staging = std::make_shared<ByteBuffer>(partition.bytes);
  g0->copy_out_sum(partition, staging);
  std::vector<float> expected(partition.bytes / sizeof(float), 0.0f);
  for (int rank : {0, 1, 2}) {
    const auto values = cpu_values(workload, rank, 2, partition);
    for (std::size_t j = 0; j < expected.size(); ++j) expected[j] += values[j];
  }
  const auto staged = staging->floats();
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), staged.begin()));
  EXPECT_EQ(d1.read(partition), cpu_values(workload, 1, 2, partition));  // a member's values stay its own
  EXPECT_THROW(g1->copy_out_sum(partition, staging), DeviceError);       // only the root holds the sum
  EXPECT_THROW(g0->copy_in_sum(partition, std::vector<float>(3)), DeviceError);
  std::vector<float> aggregate(expected.size());
  for (std::size_t j = 0; j < aggregate.size(); ++j)
    aggregate[j] = workload.expected_round_sum(2, partition.key, j);
  g0->copy_in_sum(partition, aggregate);
  for (auto* group : {g1.get(), g0.get(), g2.get()}) group->broadcast(partition);
  for (auto* device : {&d0, &d1, &d2}) EXPECT_EQ(device->read(partition), aggregate);
  EXPECT_THROW(g0->broadcast(workload.partitions().back()), DeviceError);  // nothing reduced there yet
  EXPECT_THROW(d0.join_group(std::vector<std::byte>(kDeviceGroupIdBytes), 0, 1), DeviceError);  // no such id
  EmulatedDevice alone(workload, 3);
  EXPECT_THROW(alone.new_group_id(), DeviceError);  // a device of no job's groups
}

// The seam of the MLP's device step (ps/device.hpp DeviceMlpStep), without a GPU: a stand-in that
// computes with train::Mlp on the CPU, or fails like a cuBLAS call.
class TestMlpStep final : public DeviceMlpStep {
 public:
  TestMlpStep(std::span<const std::size_t> layers, std::size_t max_batch, int* calls, bool fail)
      : model_(std::vector<std::size_t>(layers.begin(), layers.end())),
        workspace_(model_.workspace(max_batch)),
        calls_(calls),
        fail_(fail) {}
  std::string describe() const override { return "test GPU"; }
  double loss_and_gradient(std::span<const float> params, std::span<const float> x,
                           std::span<const std::uint8_t> y, std::span<float> grad) override {
    ++*calls_;
    if (fail_) throw DeviceError("cublasSgemm(forward, layer 1): the GPU program failed to execute");
    return model_.loss_and_gradient(params, x, y, grad, workspace_);
  }

 private:
  train::Mlp model_;
  train::MlpWorkspace workspace_;
  int* calls_;
  bool fail_;
};

// mlp_quick (2 workers, 1 server, 2 rounds) on the test harness with `step` as the real backends'
// MlpStepFactory: runs until every node stopped; returns the nodes' failures (empty: none failed).
std::vector<std::string> harness_mlp_job(const MlpStepFactory& step) {
  const Scenario sc = mlp_quick({{"workload.device", "cuda"}, {"workload.iterations", "2"}});
  const zeno::JobRoles roles(sc, {}, step);
  RunObserver observer;
  testing::Harness harness;
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<testing::FakeRuntime*> runtimes;
  auto add = [&](const std::string& address, Role role, int rank) {
    auto& rt = harness.add(address);
    nodes.push_back(roles.make(role, rank, rt, observer, role == Role::kScheduler ? "" : "scheduler"));
    rt.node = nodes.back().get();
    runtimes.push_back(&rt);
  };
  add("scheduler", Role::kScheduler, 0);
  add("server0", Role::kServer, 0);
  add("worker0", Role::kWorker, 0);
  add("worker1", Role::kWorker, 1);
  for (auto* rt : runtimes) rt->node->start();
  const auto all_stopped = [&] {
    return std::ranges::all_of(runtimes, [](auto* rt) { return rt->stopped; });
  };
  harness.run(all_stopped);
  EXPECT_TRUE(all_stopped());
  std::vector<std::string> failures;
  for (const auto* rt : runtimes)
    if (!rt->failure.empty()) failures.push_back(rt->failure);
  return failures;
}

// What the real backends do with workload.kind = "mlp" on "cuda": every honest worker's step goes
// through its device step (one per worker, one call per round), and a device error in it fails the run
// naming the worker and the call, never a crash.
TEST(Device, MlpStepRunsEveryWorkersRoundAndItsErrorFailsTheRunNamingTheWorker) {
  SKIP_WITHOUT_CUDA_BUILD();
  int calls = 0;
  int made = 0;
  const auto failures = harness_mlp_job([&](std::span<const std::size_t> layers, std::size_t batch, int) {
    ++made;
    return std::make_unique<TestMlpStep>(layers, batch, &calls, false);
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
  EXPECT_EQ(made, 2);
  EXPECT_EQ(calls, 2 * 2);
  calls = 0;
  const auto failed = harness_mlp_job([&](std::span<const std::size_t> layers, std::size_t batch, int) {
    return std::make_unique<TestMlpStep>(layers, batch, &calls, true);
  });
  ASSERT_FALSE(failed.empty());
  // e.g. "worker 0 (node 9 at worker0) failed: worker 0: cublasSgemm(forward, layer 1): ..."
  EXPECT_NE(
      failed.front().find(": worker 0: cublasSgemm(forward, layer 1): the GPU program failed to execute"),
      std::string::npos)
      << failed.front();
  // A device that cannot be opened: the worker is named when it is made.
  try {
    harness_mlp_job([](std::span<const std::size_t>, std::size_t, int) -> std::unique_ptr<DeviceMlpStep> {
      throw DeviceError("cudaGetDeviceCount: no CUDA device visible");
    });
    ADD_FAILURE() << "no exception";
  } catch (const DeviceError& e) {
    EXPECT_EQ(std::string(e.what()),
              "worker 0: workload.device = \"cuda\": cudaGetDeviceCount: no CUDA device visible");
  }
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

// ps.local_reduce = "nccl" with what one GPU allows: a communicator of one rank. Its reduce is the rank's
// own values in the sum buffer, its broadcast the pulled aggregate in the values: every NCCL and CUDA call
// of the group runs for real, and a bad id fails naming the call.
TEST(Cuda, NcclGroupOfOneRankReducesAndBroadcastsOnOneGpu) {
  SKIP_WITHOUT_NCCL_GPUS(1);
  const Scenario sc = quickstart({{"workload.device", "cuda"}});
  const SyntheticWorkload workload(sc);
  const auto device = cuda::make_device_tensors(workload, 0);
  const auto id = device->new_group_id();
  EXPECT_EQ(id.size(), kDeviceGroupIdBytes);
  const auto group = device->join_group(id, 0, 1);
  EXPECT_NE(group->describe().find("nccl rank 0 of 1 on cuda:"), std::string::npos) << group->describe();
  for (std::uint32_t iteration : {0u, 5u}) {
    for (const auto& partition : workload.partitions()) {
      SCOPED_TRACE("key " + std::to_string(partition.key) + ", iteration " + std::to_string(iteration));
      device->produce(partition, iteration);
      group->reduce(partition);
      auto staging = std::make_shared<ByteBuffer>(partition.bytes);
      group->copy_out_sum(partition, staging);
      const auto expected = cpu_values(workload, 0, iteration, partition);
      const auto staged = staging->floats();
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), staged.begin()));
      std::vector<float> aggregate(expected.size());
      for (std::size_t j = 0; j < aggregate.size(); ++j)
        aggregate[j] = workload.expected_round_sum(iteration, partition.key, j);
      group->copy_in_sum(partition, aggregate);
      group->broadcast(partition);
      EXPECT_EQ(device->read(partition), aggregate);
    }
  }
  EXPECT_THROW(group->copy_in_sum(workload.partitions().front(), std::vector<float>(3)), DeviceError);
  try {
    device->join_group(std::vector<std::byte>(5), 0, 1);
    ADD_FAILURE() << "joined with a 5-byte id";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("ncclCommInitRank"), std::string::npos) << e.what();
  }
}

// Two ranks on two GPUs, each on its own thread as two workers' lanes would be: the sum is exact and the
// broadcast reaches both.
TEST(Cuda, NcclGroupOfTwoGpusSumsAndBroadcastsExactly) {
  SKIP_WITHOUT_NCCL_GPUS(2);
  const Scenario sc = quickstart({{"workload.device", "cuda"}});
  const SyntheticWorkload workload(sc);
  const auto d0 = cuda::make_device_tensors(workload, 0);  // GPU 0
  const auto d1 = cuda::make_device_tensors(workload, 1);  // GPU 1
  const auto id = d0->new_group_id();
  std::unique_ptr<DeviceGroup> g0, g1;
  // Both ranks' calls at once, as NCCL needs; an error on the other thread is reported, not lost.
  auto both = [](const std::function<void()>& mine, const std::function<void()>& other) {
    std::string error;
    std::thread peer([&] {
      try {
        other();
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    try {
      mine();
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
    peer.join();
    EXPECT_EQ(error, "");
  };
  both([&] { g0 = d0->join_group(id, 0, 2); }, [&] { g1 = d1->join_group(id, 1, 2); });
  ASSERT_TRUE(g0 && g1);
  for (const auto& partition : workload.partitions()) {
    SCOPED_TRACE("key " + std::to_string(partition.key));
    d0->produce(partition, 1);
    d1->produce(partition, 1);
    both([&] { g0->reduce(partition); }, [&] { g1->reduce(partition); });
    auto staging = std::make_shared<ByteBuffer>(partition.bytes);
    g0->copy_out_sum(partition, staging);
    const auto a = cpu_values(workload, 0, 1, partition), b = cpu_values(workload, 1, 1, partition);
    const auto staged = staging->floats();
    for (std::size_t j = 0; j < a.size(); ++j) ASSERT_EQ(staged[j], a[j] + b[j]) << "element " << j;
    std::vector<float> aggregate(a.size());
    for (std::size_t j = 0; j < aggregate.size(); ++j)
      aggregate[j] = workload.expected_round_sum(1, partition.key, j);
    g0->copy_in_sum(partition, aggregate);
    both([&] { g0->broadcast(partition); }, [&] { g1->broadcast(partition); });
    EXPECT_EQ(d0->read(partition), aggregate);
    EXPECT_EQ(d1->read(partition), aggregate);
  }
}

// The real job: 2 hosts x 2 workers (a GPU each on this machine: ranks 0, 1 on GPUs 0, 1 for h3, and
// again for h4) with "nccl" give the simulator's model and cross-host bytes, and half those of "none".
TEST(Cuda, NcclRealJobGivesTheSimulatorsModel) {
  SKIP_WITHOUT_NCCL_GPUS(2);
  const auto dir = fresh_dir("cuda-nccl");
  const std::string sets =
      " -q --set workload.iterations=3 --set workload.device=cuda --set roles.workers=4"
      " --set 'roles.worker_hosts=[\"h3\", \"h3\", \"h4\", \"h4\"]' --out ";
  const auto sim = run_pstwin("sim scenarios/local_reduce_2x4.toml --set ps.local_reduce=nccl" + sets +
                              (dir / "sim").string());
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  const auto run = run_pstwin("run scenarios/local_reduce_2x4.toml --set ps.local_reduce=nccl" + sets +
                              (dir / "run").string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto none = run_pstwin("run scenarios/local_reduce_2x4.toml --set ps.local_reduce=none" + sets +
                               (dir / "none").string());
  ASSERT_EQ(none.exit_code, 0) << none.output;
  const auto s = read_json(dir / "sim" / "results.json");
  const auto r = read_json(dir / "run" / "results.json");
  const auto n = read_json(dir / "none" / "results.json");
  EXPECT_EQ(r["invariants"]["violation_count"], 0);
  EXPECT_FALSE(s["model_digest"].get<std::string>().empty());
  EXPECT_EQ(r["model_digest"], s["model_digest"]);
  EXPECT_EQ(n["model_digest"], s["model_digest"]);
  const auto bytes = [](const nlohmann::json& j) {
    return j["cross_host"]["push_pull_bytes"].get<std::uint64_t>();
  };
  EXPECT_EQ(bytes(r), bytes(s));
  EXPECT_EQ(2 * bytes(r), bytes(n));
}

// With fewer GPUs than a host has workers, `pstwin run` refuses before any process starts, naming the
// workers that would share a GPU (NCCL itself would fail every rank with "Duplicate GPU detected").
TEST(Cuda, NcclWithTwoWorkersOfAHostOnOneGpuIsRefusedNamingThem) {
  if (!built_with_nccl()) GTEST_SKIP() << "built without NCCL: ps.local_reduce = \"nccl\" is refused";
  SKIP_WITHOUT_GPU();
  const int gpus = cuda::availability().devices;
  if (gpus >= 4) GTEST_SKIP() << gpus << " GPUs: each of a host's 4 workers has its own";
  const auto run = run_pstwin(
      "run scenarios/local_reduce_2x4.toml -q --set workload.device=cuda --set ps.local_reduce=nccl --out " +
      fresh_dir("cuda-nccl-shared").string());
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("ps.local_reduce = \"nccl\": workers 0 and " + std::to_string(gpus) +
                            " of host h3 would share cuda:0"),
            std::string::npos)
      << run.output;
}

// The MLP step on the GPU against the CPU's on the same parameters and batches: the loss and every
// gradient entry within |gpu - cpu| <= 1e-5 + 1e-4 |cpu|. Both sum float32 products, in different
// orders (cuBLAS's blocking, Eigen's fixed one): for an inner dimension of k terms the rounding error
// is bounded by about k x 2^-24 relative to the sum of magnitudes, 784 x 6e-8 = 5e-5 for layer 1 in
// the worst case and far less in practice; the absolute 1e-5 covers entries that cancel to near zero
// (gradients of these batches are 1e-3 to 1e-1). TF32 would miss this by 100x: the step asks cuBLAS
// for pedantic float32. A full and a partial batch; every layer's error passes a ReLU.
TEST(Cuda, MlpStepMatchesTheCpuStep) {
  SKIP_WITHOUT_GPU();
  const train::Mlp model;  // 784-256-128-10
  std::vector<float> params(model.parameter_count());
  RandomStream init(1, "test.mlp.init");
  model.initialize(params, init);
  // Nonzero biases, so that a missed bias add would show.
  RandomStream bias(1, "test.mlp.bias");
  for (std::size_t t = 0; t < model.tensors().size(); ++t)
    if (model.tensors()[t].cols == 1)
      for (float& b : model.tensor(std::span<float>(params), t))
        b = static_cast<float>(bias.uniform(-0.1, 0.1));
  constexpr std::size_t kMaxBatch = 64;
  const auto layers = model.layers();
  auto gpu = cuda::make_mlp_step(layers, kMaxBatch, 0);
  EXPECT_NE(gpu->describe().find("cuda:"), std::string::npos) << gpu->describe();
  auto ws = model.workspace(kMaxBatch);
  RandomStream data(1, "test.mlp.batch");
  for (const std::size_t batch : {kMaxBatch, std::size_t{7}}) {
    SCOPED_TRACE("batch of " + std::to_string(batch));
    std::vector<float> x(batch * model.inputs());
    for (float& v : x) v = static_cast<float>(data.uniform01());  // pixels in [0, 1), as the data set's
    std::vector<std::uint8_t> y(batch);
    for (auto& label : y) label = static_cast<std::uint8_t>(data.uniform01() * 10);
    std::vector<float> cpu_grad(params.size()), gpu_grad(params.size(), -1.0f);
    const double cpu_loss = model.loss_and_gradient(params, x, y, cpu_grad, ws);
    const double gpu_loss = gpu->loss_and_gradient(params, x, y, gpu_grad);
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 + 1e-4 * std::abs(cpu_loss));
    std::size_t bad = 0;
    for (const auto& t : model.tensors()) {
      for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) {
        const double tolerance = 1e-5 + 1e-4 * std::abs(cpu_grad[i]);
        if (std::abs(static_cast<double>(gpu_grad[i]) - cpu_grad[i]) <= tolerance) continue;
        if (++bad <= 5)
          ADD_FAILURE() << t.name << "[" << i - t.offset << "]: gpu " << gpu_grad[i] << ", cpu "
                        << cpu_grad[i];
      }
    }
    EXPECT_EQ(bad, 0u) << "gradient entries outside the tolerance";
  }
  // Misuse is a DeviceError naming the problem, not a crash.
  std::vector<float> grad(params.size());
  std::vector<float> x(model.inputs());
  EXPECT_THROW(gpu->loss_and_gradient(params, x, std::vector<std::uint8_t>{10}, grad), DeviceError);
  EXPECT_THROW(gpu->loss_and_gradient(params, x, std::vector<std::uint8_t>(kMaxBatch + 1), grad),
               DeviceError);
}

// The real job with the MLP step on the GPU learns the CPU's model within float tolerance: after 300
// sync rounds of mlp_quick the two test accuracies are within 1 percentage point (float rounding
// differences grow over training, so the models are close, not equal).
TEST(Cuda, MlpRealJobReachesTheCpuAccuracy) {
  SKIP_WITHOUT_GPU();
  const auto dir = fresh_dir("cuda-mlp");
  const auto cpu = run_pstwin("run scenarios/mlp_quick.toml -q --out " + (dir / "cpu").string());
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  const auto gpu = run_pstwin("run scenarios/mlp_quick.toml -q --set workload.device=cuda --out " +
                              (dir / "gpu").string());
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  const auto c = read_json(dir / "cpu" / "results.json");
  const auto g = read_json(dir / "gpu" / "results.json");
  EXPECT_TRUE(g["completed"].get<bool>());
  EXPECT_EQ(g["invariants"]["violation_count"], 0);
  const double cpu_accuracy = c["accuracy"]["final"].get<double>();
  const double gpu_accuracy = g["accuracy"]["final"].get<double>();
  EXPECT_GT(gpu_accuracy, 0.80);
  EXPECT_NEAR(gpu_accuracy, cpu_accuracy, 0.01);
}

}  // namespace
}  // namespace pstwin
