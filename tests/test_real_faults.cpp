// [faults] in the real backend (docs/FAULTS.md "The same faults for real"): each node applies the
// scenario's faults to what it receives, to its executor tasks and to itself, on the job's clock; with
// ps.resend the run reaches the fault-free model, a crashed worker with ps.on_worker_loss = "continue"
// leaves the same model as in the simulator, and `pstwin run` reports what was injected.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "realnet/local_run.hpp"
#include "scenario/scenario.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using Sets = std::vector<std::pair<std::string, std::string>>;
using testing::fresh_dir;
using testing::read_json;
using testing::run_pstwin;

Scenario quickstart(Sets sets) {
  sets.emplace_back("workload.iterations", "10");
  return load_scenario(PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml", sets);
}

// Wall-clock resends: a short timeout keeps the tests quick (spurious resends are harmless).
const std::pair<std::string, std::string> kQuickResend{"ps.resend_timeout", "50ms"};

const std::string& fault_free_digest() {
  static const std::string digest = [] {
    const auto plain = realnet::run_local(quickstart({}));
    EXPECT_TRUE(plain.ok()) << plain.failure;
    return plain.model_digest;
  }();
  return digest;
}

TEST(RealFaults, APartitionDropsWhatCrossesItAndResendHealsIt) {
  const auto run = realnet::run_local(quickstart(
      {{"faults.partitions", R"([{nodes = ["worker 1"], from = "20ms", until = "150ms"}])"}, kQuickResend}));
  ASSERT_TRUE(run.ok()) << run.failure;
  EXPECT_EQ(run.model_digest, fault_free_digest());
  ASSERT_TRUE(run.faults);
  EXPECT_TRUE(run.faults->resend_enabled) << "a partition turns resend on by default";
  EXPECT_GT(run.faults->partitioned, 0u);
  EXPECT_GT(run.faults->resent, 0u);
  EXPECT_NE(run.faults->first_drop.find("worker 1"), std::string::npos) << run.faults->first_drop;
  EXPECT_NE(run.faults->first_drop.find("(faults.partitions)"), std::string::npos) << run.faults->first_drop;
  EXPECT_EQ(run.violation_count, 0u);
}

TEST(RealFaults, AClogHoldsMessagesInOrderAndLosesNothing) {
  // No resend: a clog loses nothing, so the run needs none.
  const auto run = realnet::run_local(
      quickstart({{"faults.clog", R"([{nodes = ["server 0"], from = "20ms", duration = "100ms"}])"}}));
  ASSERT_TRUE(run.ok()) << run.failure;
  EXPECT_EQ(run.model_digest, fault_free_digest());
  ASSERT_TRUE(run.faults);
  EXPECT_FALSE(run.faults->resend_enabled);
  EXPECT_GT(run.faults->clogged, 0u);
  EXPECT_GT(run.faults->clog_hold_s, 0.0);
  EXPECT_LE(run.faults->clog_hold_s, 0.1 * static_cast<double>(run.faults->clogged) + 1e-9);
  EXPECT_EQ(run.faults->lost + run.faults->partitioned, 0u);
  EXPECT_EQ(run.violation_count, 0u);
}

TEST(RealFaults, ASlowNodeStretchesItsTasksAndNothingElse) {
  const auto run =
      realnet::run_local(quickstart({{"faults.slow", R"([{node = "worker 2", factor = 4, from = "0s"}])"}}));
  ASSERT_TRUE(run.ok()) << run.failure;
  EXPECT_EQ(run.model_digest, fault_free_digest());
  ASSERT_TRUE(run.faults);
  EXPECT_GT(run.faults->slowed, 0u);
  EXPECT_EQ(run.faults->lost + run.faults->partitioned + run.faults->clogged, 0u);
  // Sync rounds wait for worker 2's compute, 4 x 10 ms, every iteration.
  double total_s = 0;
  for (const auto& it : run.iterations) total_s += it.time_s;
  EXPECT_GE(total_s, 10 * 0.040) << "iterations did not wait for the slowed worker";
}

// `pstwin sim` and `pstwin run` of the quickstart with these --set flags, both expected to succeed:
// their results.json.
std::pair<nlohmann::json, nlohmann::json> simulate_and_run(const std::string& tag, const std::string& sets) {
  const auto dir = fresh_dir(tag);
  const auto sim = run_pstwin("sim scenarios/quickstart.toml -q --out " + (dir / "sim").string() + sets);
  EXPECT_EQ(sim.exit_code, 0) << sim.output;
  const auto real = run_pstwin("run scenarios/quickstart.toml -q --out " + (dir / "run").string() + sets);
  EXPECT_EQ(real.exit_code, 0) << real.output;
  return {read_json(dir / "sim" / "results.json"), read_json(dir / "run" / "results.json")};
}

// Loss and duplication on receipt, through the node processes of `pstwin run`: the run reports what
// every node injected and resent, and reaches the simulator's model.
TEST(RealFaults, PstwinRunWithLossAndDuplicationReachesTheSimulatorsModel) {
  const auto [s, r] = simulate_and_run("real-faults-loss",
                                       " --set workload.iterations=10 --set faults.loss=0.01 --set "
                                       "faults.duplicate=0.01 --set ps.resend_timeout=50ms");
  EXPECT_EQ(r["model_digest"], s["model_digest"]);
  EXPECT_EQ(r["invariants"]["violation_count"], 0) << r["invariants"]["violations"].dump();
  ASSERT_TRUE(r.contains("faults")) << r.dump();
  const auto& injected = r["faults"]["injected"];
  // About 1 % of some 2000 messages each; none at all would be a 1e-8 chance.
  EXPECT_GT(injected["loss"].get<int>() + injected["duplicate"].get<int>(), 0) << r["faults"].dump();
  EXPECT_TRUE(r["faults"]["resend"]["enabled"].get<bool>());
  EXPECT_GT(r["faults"]["resend"]["acks"].get<int>(), 0);
}

// A worker crashed at an iteration, for real (its process stops as under kill -9) and in the simulator,
// with ps.on_worker_loss = "continue": both finish with the survivors, and with the same model.
TEST(RealFaults, AWorkerCrashedAtAnIterationLeavesTheSimulatorsModel) {
  const auto [s, r] = simulate_and_run(
      "real-faults-crash",
      R"( --set workload.iterations=6 --set 'faults.crashes=[{node = "worker 1", iteration = 3}]')"
      " --set ps.on_worker_loss=continue --set ps.heartbeat_interval=100ms --set ps.heartbeat_timeout=1s");
  EXPECT_TRUE(r["completed"].get<bool>()) << r["failure"];
  EXPECT_EQ(r["invariants"]["violation_count"], 0) << r["invariants"]["violations"].dump();
  EXPECT_EQ(r["model_digest"], s["model_digest"]);
  EXPECT_EQ(r["faults"]["injected"]["crash"], 1);
  ASSERT_EQ(r["faults"]["lost_workers"].size(), 1u) << r["faults"].dump();
  EXPECT_EQ(r["faults"]["lost_workers"][0].get<std::string>().rfind("worker 1 at ", 0), 0u);
  EXPECT_EQ(r["iterations"].size(), 6u);
}

// A timed crash of the server ends the job, naming it, in every node's words.
TEST(RealFaults, AServerCrashedAtATimeFailsTheJobNamingIt) {
  const auto dir = fresh_dir("real-faults-server");
  const auto real = run_pstwin(
      "run scenarios/quickstart.toml -q --out " + dir.string() +
      R"( --set workload.iterations=300 --set 'faults.crashes=[{node = "server 1", at = "300ms"}]')"
      " --set ps.heartbeat_interval=100ms --set ps.heartbeat_timeout=1s");
  EXPECT_EQ(real.exit_code, 1) << real.output;
  const auto r = read_json(dir / "results.json");
  EXPECT_FALSE(r["completed"].get<bool>());
  const std::string failure = r["failure"];
  EXPECT_NE(failure.find("server 1 (node 10"), std::string::npos) << failure;
  EXPECT_NE(failure.find("presumed dead"), std::string::npos) << failure;
  EXPECT_EQ(r["faults"]["injected"]["crash"], 1);
}

}  // namespace
}  // namespace pstwin
