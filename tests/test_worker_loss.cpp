// faults.crashes and ps.on_worker_loss through the real pstwin binary and real SimGrid (docs/FAULTS.md):
// a crashed node is declared dead by the scheduler and the job either fails naming it or, for a worker
// with ps.on_worker_loss = "continue", goes on with the survivors, its rounds resolved without the
// lost worker and nothing counted twice (the invariant checker sums exactly what was applied).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "scenario/scenario.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::fresh_dir;
using testing::read_json;
using testing::run_pstwin;

struct SimRun {
  int exit_code = 0;
  std::string output;
  nlohmann::json results;
};

SimRun simulate(const std::string& name, const std::string& scenario, const std::vector<std::string>& sets) {
  const auto dir = fresh_dir(name);
  std::string args = "sim " + scenario + " -q --out " + dir.string();
  for (const auto& set : sets) args += " --set '" + set + "'";
  const auto run = run_pstwin(args);
  return {run.exit_code, run.output, read_json(dir / "results.json")};
}

const std::string kQuickstart = "scenarios/quickstart.toml";
const std::string kWorker1At30ms = R"(faults.crashes=[{node = "worker 1", at = "30ms"}])";

TEST(WorkerLoss, ACrashedWorkerFailsTheJobNamingItByDefault) {
  const auto run = simulate("crash-fail", kQuickstart, {kWorker1At30ms});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const auto& r = run.results;
  EXPECT_FALSE(r["completed"].get<bool>());
  const std::string failure = r["failure"];
  EXPECT_NE(failure.find("worker 1 (node 11"), std::string::npos) << failure;
  EXPECT_NE(failure.find("presumed dead"), std::string::npos) << failure;
  EXPECT_EQ(r["faults"]["injected"]["crash"], 1);
  // Declared within ps.heartbeat_timeout (10 s) + one heartbeat interval of the crash.
  EXPECT_GT(r["run_time_s"].get<double>(), 10.0);
  EXPECT_LT(r["run_time_s"].get<double>(), 10.0 + 0.03 + 1.0 + 1.0);
}

TEST(WorkerLoss, WithContinueTheSurvivorsFinishAndEveryAggregateIsTheirs) {
  const auto run = simulate("crash-continue", kQuickstart, {kWorker1At30ms, "ps.on_worker_loss=continue"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const auto& r = run.results;
  EXPECT_TRUE(r["completed"].get<bool>()) << r["failure"];
  // aggregates: each round's sum is exactly the applied pushes; updates: every survivor's push applied
  // once, the lost worker's earlier ones once; sync_identical: survivors pulled equal values.
  EXPECT_EQ(r["invariants"]["violation_count"], 0) << r["invariants"]["violations"].dump();
  for (const std::string invariant : {"aggregates", "updates", "sync_identical"})
    EXPECT_GT(r["invariants"]["by_invariant"][invariant]["checked"].get<int>(), 0) << invariant;
  ASSERT_EQ(r["faults"]["lost_workers"].size(), 1u);
  EXPECT_EQ(r["faults"]["lost_workers"][0].get<std::string>().rfind("worker 1 at 1", 0), 0u)
      << r["faults"]["lost_workers"];
  EXPECT_EQ(r["iterations"].size(), 5u);

  // The same crash replays to the same run.
  const auto again =
      simulate("crash-continue-again", kQuickstart, {kWorker1At30ms, "ps.on_worker_loss=continue"});
  EXPECT_EQ(again.results["model_digest"], r["model_digest"]);
  EXPECT_EQ(again.results["run_time_s"], r["run_time_s"]);
}

TEST(WorkerLoss, ACrashAtAnIterationTakesTheWorkerAsItWouldStartIt) {
  const auto run =
      simulate("crash-iteration", kQuickstart,
               {R"(faults.crashes=[{node = "worker 3", iteration = 2}])", "ps.on_worker_loss=continue"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const auto& r = run.results;
  EXPECT_TRUE(r["completed"].get<bool>()) << r["failure"];
  EXPECT_EQ(r["invariants"]["violation_count"], 0) << r["invariants"]["violations"].dump();
  EXPECT_EQ(r["faults"]["injected"]["crash"], 1);
  ASSERT_EQ(r["faults"]["lost_workers"].size(), 1u);
  EXPECT_EQ(r["faults"]["lost_workers"][0].get<std::string>().rfind("worker 3 at", 0), 0u);
}

TEST(WorkerLoss, ALostServerOrSchedulerFailsTheJobEvenWithContinue) {
  const auto server =
      simulate("crash-server", kQuickstart,
               {R"(faults.crashes=[{node = "server 0", at = "30ms"}])", "ps.on_worker_loss=continue"});
  EXPECT_EQ(server.exit_code, 1);
  EXPECT_NE(server.results["failure"].get<std::string>().find("server 0 (node 8"), std::string::npos)
      << server.results["failure"];
  const auto scheduler =
      simulate("crash-scheduler", kQuickstart, {R"(faults.crashes=[{node = "scheduler", at = "30ms"}])"});
  EXPECT_EQ(scheduler.exit_code, 1);
  EXPECT_NE(scheduler.results["failure"].get<std::string>().find("the scheduler"), std::string::npos)
      << scheduler.results["failure"];
}

// Training: the survivors' mean gradient goes on; with resend on, what was sent to the dead worker is
// forgotten rather than failing the run; async scales each update to the survivors.
TEST(WorkerLoss, TrainingGoesOnWithTheSurvivorsSyncAndAsyncWithResend) {
  for (const std::string mode : {"sync", "async"}) {
    SCOPED_TRACE(mode);
    const auto run =
        simulate("crash-mlp-" + mode, "scenarios/mlp_quick.toml",
                 {R"(faults.crashes=[{node = "worker 1", at = "0.3s"}])", "ps.on_worker_loss=continue",
                  "ps.mode=" + mode, "ps.resend=true", "faults.loss=0.01"});
    EXPECT_EQ(run.exit_code, 0) << run.output;
    const auto& r = run.results;
    EXPECT_TRUE(r["completed"].get<bool>()) << r["failure"];
    EXPECT_EQ(r["invariants"]["violation_count"], 0) << r["invariants"]["violations"].dump();
    EXPECT_EQ(r["faults"]["lost_workers"].size(), 1u);
    EXPECT_EQ(r["faults"]["resend"]["given_up"].get<int>() > 0, true)
        << "messages to the lost worker are forgotten";
    EXPECT_GT(r["accuracy"]["final"].get<double>(), 0.5);
  }
}

// ps.backup_workers: a straggler (worker 2, 8x slower) costs a sync job little when rounds complete with
// the first workers - 1 pushes; its late pushes are dropped, counted, and no invariant is broken.
TEST(BackupWorkers, AStragglerCostsLittleAndItsLatePushesAreCountedNotApplied) {
  const std::string straggler = R"(faults.slow=[{node = "worker 2", factor = 8}])";
  for (const std::string push_pull : {"separate", "fused"}) {
    SCOPED_TRACE(push_pull);
    const auto waited =
        simulate("backup-none-" + push_pull, kQuickstart, {straggler, "ps.push_pull=" + push_pull});
    const auto backed = simulate("backup-one-" + push_pull, kQuickstart,
                                 {straggler, "ps.push_pull=" + push_pull, "ps.backup_workers=1"});
    ASSERT_EQ(backed.exit_code, 0) << backed.output;
    EXPECT_TRUE(backed.results["completed"].get<bool>()) << backed.results["failure"];
    EXPECT_EQ(backed.results["invariants"]["violation_count"], 0)
        << backed.results["invariants"]["violations"].dump();
    EXPECT_GT(backed.results["late_pushes"].get<int>(), 0);
    EXPECT_FALSE(waited.results.contains("late_pushes"));
    // The job is done when all but the straggler are: it no longer waits for its pushes or its end.
    EXPECT_LT(backed.results["run_time_s"].get<double>(), 0.5 * waited.results["run_time_s"].get<double>());
  }
  const auto trained = simulate("backup-mlp", "scenarios/mlp_quick.toml",
                                {R"(faults.slow=[{node = "worker 1", factor = 10}])", "ps.backup_workers=1"});
  EXPECT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_EQ(trained.results["invariants"]["violation_count"], 0);
  EXPECT_GT(trained.results["late_pushes"].get<int>(), 0);
  EXPECT_GT(trained.results["accuracy"]["final"].get<double>(), 0.5);
}

// Swarm seed 8264: the scheduler's notice that worker 3 is lost reached server 1 through 7 % loss two
// seconds after the others; server 1's resend layer must not give up on the dead worker meanwhile.
TEST(WorkerLoss, ALateLossNoticeDoesNotFailTheResendLayer) {
  const auto run = simulate(
      "late-notice", kQuickstart,
      {"seed=8264", "faults.loss=0.0719", "faults.duplicate=0.0028",
       R"(faults.partitions=[{hosts = ["h5"], from = "0.068198s", until = "0.092799s"}])",
       R"(faults.slow=[{node = "worker 1", factor = 7.5030, from = "0.071614s", until = "0.083793s"}])",
       R"(faults.crashes=[{node = "worker 3", at = "0.069790s"}])", "ps.on_worker_loss=continue"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(run.results["completed"].get<bool>()) << run.results["failure"];
  EXPECT_EQ(run.results["invariants"]["violation_count"], 0);
}

TEST(WorkerLoss, BadCrashFieldsAreRefusedNamingFieldValueAndFix) {
  const std::vector<std::pair<std::vector<std::pair<std::string, std::string>>, std::string>> cases = {
      {{{"faults.crashes", R"([{node = "worker 9", at = "1s"}])"}}, "node \"worker 9\" does not exist"},
      {{{"faults.crashes", R"([{node = "worker 1"}])"}}, "needs exactly one of at"},
      {{{"faults.crashes", R"([{node = "worker 1", at = "1s", iteration = 2}])"}}, "needs exactly one of at"},
      {{{"faults.crashes", R"([{node = "server 0", iteration = 2}])"}}, "iteration applies to workers only"},
      {{{"faults.crashes", R"([{node = "worker 1", iteration = -1}])"}}, "expected an iteration number"},
      {{{"faults.crashes", R"([{node = "worker 1", when = "1s"}])"}}, "unknown key"},
      {{{"ps.on_worker_loss", "skip"}}, "expected one of \"fail\", \"continue\""},
      {{{"ps.on_worker_loss", "continue"}, {"roles.workers", "1"}}, "needs at least 2 workers"},
      {{{"ps.backup_workers", "4"}}, "must be below roles.workers = 4"},
      {{{"ps.mode", "async"}, {"ps.backup_workers", "1"}}, "applies to sync rounds"},
  };
  for (const auto& [sets, expected] : cases) {
    std::string error = "no error";
    try {
      load_scenario(PSTWIN_SOURCE_DIR "/" + kQuickstart, sets);
    } catch (const ScenarioError& e) {
      error = e.what();
    }
    EXPECT_NE(error.find(expected), std::string::npos) << sets.front().second << "\n" << error;
    EXPECT_NE(error.find(sets.back().first), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace pstwin
