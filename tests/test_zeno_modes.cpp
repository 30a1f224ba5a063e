// ZenoPS's experiment modes and the attack aimed at the validator, end to end
// through the pstwin binary on real Fashion-MNIST in the simulator: bounded staleness refuses exactly
// the pushes beyond the bound, local SGD pushes H steps' worth (and the validator's v matches it),
// the validator-aimed attack gets past the ZenoPS test where sign-flip never does, and worker-side
// momentum learns the undefended model while taking ALIE's room.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::fresh_dir;
using testing::read_json;
using testing::run_pstwin;

nlohmann::json sim(const std::string& name, const std::string& scenario, const std::string& sets,
                   int exit_code = 0) {
  const auto dir = fresh_dir(name);
  const auto run = run_pstwin("sim " + scenario + " -q" + sets + " --out " + dir.string());
  EXPECT_EQ(run.exit_code, exit_code) << run.output;
  return read_json(dir / "results.json");
}

// 4 workers, 1 server, 1 validator, 40 rounds of the sync ZenoPS scenario.
const std::string kSyncShort =
    " --set roles.workers=4 --set roles.servers=1 --set workload.iterations=40 --set train.eval_every=20"
    " --set zeno.validator_samples=1000";

int accepted(const nlohmann::json& r, int worker) {
  return r["validation"]["per_worker"][static_cast<std::size_t>(worker)][1].get<int>();
}

TEST(ZenoModes, ValidatorAimedAttackPassesTheZenoPsTestWhereSignFlipFails) {
  const auto aimed =
      sim("zeno-m-aimed", "scenarios/zeno_sync_1v.toml",
          kSyncShort + " --set attack.kind=validator --set attack.margin=0.6 --set attack.byzantine=[1]");
  const auto flip =
      sim("zeno-m-flip", "scenarios/zeno_sync_1v.toml", kSyncShort + " --set attack.byzantine=[1]");
  ASSERT_TRUE(aimed["completed"].get<bool>()) << aimed["failure"];
  ASSERT_TRUE(flip["completed"].get<bool>()) << flip["failure"];
  EXPECT_EQ(aimed["invariants"]["violation_count"], 0) << aimed["invariants"].dump();
  EXPECT_EQ(accepted(flip, 1), 0);
  // The attacker only estimates v (its own gradient), so it does not pass every time, but often.
  EXPECT_GE(accepted(aimed, 1), 15) << aimed["validation"].dump();
  // It is an attack: what it sends is not its honest update, so the model differs from no attack.
  const auto none = sim("zeno-m-none", "scenarios/zeno_sync_1v.toml",
                        kSyncShort + " --set attack.kind=none --set attack.byzantine=[]");
  EXPECT_NE(aimed["model_digest"], none["model_digest"]);
}

TEST(ZenoModes, LocalStepsPushHStepsAndTheValidatorsVMatches) {
  const auto one =
      sim("zeno-m-h1", "scenarios/zeno_sync_1v.toml", kSyncShort + " --set attack.byzantine=[1]");
  const auto four =
      sim("zeno-m-h4", "scenarios/zeno_sync_1v.toml",
          kSyncShort + " --set attack.byzantine=[1] --set train.local_steps=4 --set zeno.local_steps=4");
  ASSERT_TRUE(four["completed"].get<bool>()) << four["failure"];
  EXPECT_EQ(four["invariants"]["violation_count"], 0) << four["invariants"].dump();
  // v is the validator's update after 4 steps too: honest updates (4 steps' worth) pass the norm test
  // (with v left at one step they would be ~16x too long for c = 4) and the sign-flipped one never.
  for (int w : {0, 2, 3}) EXPECT_GE(accepted(four, w), 28) << four["validation"].dump();
  EXPECT_EQ(accepted(four, 1), 0);
  // Four local steps per round learn more in 40 rounds than one, and take longer to compute.
  EXPECT_GT(four["accuracy"]["final"].get<double>(), one["accuracy"]["final"].get<double>())
      << "H=4 " << four["accuracy"].dump() << "\nH=1 " << one["accuracy"].dump();
  EXPECT_GT(four["run_time_s"].get<double>(), one["run_time_s"].get<double>());
}

// Async, no validators: worker 0 alone on h1, workers 1-3 share one core on h2 (3x slower each).
const std::string kAsyncSkew =
    " --set roles.workers=4 --set roles.servers=1 --set roles.validators=0 --set zeno.rule=mean"
    " --set attack.kind=none --set attack.probability=0 --set workload.iterations=30 --set train.eval_every=0"
    " --set cluster.hosts=4 --set cluster.host_cores=1 --set roles.server_hosts=h0"
    " --set roles.worker_hosts=h1,h2,h2,h2";

TEST(ZenoModes, BoundedStalenessNeverAppliesAPushBeyondTheBound) {
  const auto bounded =
      sim("zeno-m-stale2", "scenarios/zeno_async_1v.toml", kAsyncSkew + " --set ps.max_staleness=2");
  ASSERT_TRUE(bounded["completed"].get<bool>()) << bounded["failure"];
  EXPECT_EQ(bounded["invariants"]["violation_count"], 0) << bounded["invariants"].dump();
  const auto& s = bounded["staleness"];
  EXPECT_EQ(s["bound"], 2);
  EXPECT_LE(s["max_applied"].get<int>(), 2) << s.dump();
  EXPECT_GT(s["refused"].get<int>(), 0) << s.dump();
  EXPECT_GT(s["max_seen"].get<int>(), 2) << s.dump();
  // The slow workers' pushes are the stale ones.
  EXPECT_GT(s["refused_per_worker"][1].get<int>(), 0) << s.dump();
  // A bound no push reaches refuses nothing: the same skew does produce staleness beyond 2.
  const auto loose =
      sim("zeno-m-stale-loose", "scenarios/zeno_async_1v.toml", kAsyncSkew + " --set ps.max_staleness=1000");
  EXPECT_EQ(loose["staleness"]["refused"], 0) << loose["staleness"].dump();
  EXPECT_GT(loose["staleness"]["max_applied"].get<int>(), 2) << loose["staleness"].dump();
  // Sync rounds have no staleness to bound: bad input naming the field.
  const auto sync = run_pstwin("check scenarios/zeno_sync_1v.toml --set ps.max_staleness=2");
  EXPECT_EQ(sync.exit_code, 2) << sync.output;
  EXPECT_NE(sync.output.find("ps.max_staleness"), std::string::npos) << sync.output;
}

// The same bound across real processes: each server counts its own keys' pushes and `pstwin run`
// merges the counts into results.json's `staleness` as the simulator writes it. Which pushes are
// stale depends on real timing; that every push is counted once, applied or refused, does not.
TEST(ZenoModes, ARealJobReportsEveryServersStalenessCounts) {
  const std::string sets =
      " --set roles.workers=4 --set roles.servers=2 --set roles.validators=0 --set zeno.rule=mean"
      " --set attack.kind=none --set attack.probability=0 --set workload.iterations=20"
      " --set train.eval_every=0 --set ps.max_staleness=1 --set ps.connect_timeout=60";
  const auto sim_dir = fresh_dir("zeno-m-stale-sim"), real = fresh_dir("zeno-m-stale-real");
  const auto s = run_pstwin("sim scenarios/zeno_async_1v.toml -q" + sets + " --out " + sim_dir.string());
  ASSERT_EQ(s.exit_code, 0) << s.output;
  std::vector<std::string> args{"run", "scenarios/zeno_async_1v.toml", "-q", "--out", real.string()};
  std::istringstream words(sets);
  for (std::string word; words >> word;) args.push_back(word);
  testing::ChildProcess run(args, fresh_dir("zeno-m-stale-real-log") / "log");
  ASSERT_EQ(run.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(300)), 0) << run.output();
  const auto rs = read_json(sim_dir / "results.json"), rr = read_json(real / "results.json");
  EXPECT_EQ(rr["invariants"]["violation_count"], 0) << rr["invariants"].dump();
  ASSERT_TRUE(rr.contains("staleness")) << rr.dump();
  const auto& sr = rs["staleness"];
  const auto& r = rr["staleness"];
  EXPECT_EQ(r["bound"], 1);
  const auto total = [](const nlohmann::json& j) {
    return j["applied"].get<int>() + j["refused"].get<int>();
  };
  // 4 workers x 20 iterations x the model's partitions, over both servers.
  EXPECT_EQ(total(r), total(sr)) << "real " << r.dump() << "\nsim " << sr.dump();
  EXPECT_GT(r["applied"].get<int>(), 0) << r.dump();
  EXPECT_LE(r["max_applied"].get<int>(), 1) << r.dump();
  EXPECT_GE(r["max_seen"].get<int>(), r["max_applied"].get<int>()) << r.dump();
  int refused = 0;
  for (const auto& w : r["refused_per_worker"]) refused += w.get<int>();
  EXPECT_EQ(refused, r["refused"].get<int>()) << r.dump();
}

// Sync, 4 workers, 1 server, no validators: the plain mean over the round's participants.
const std::string kSyncMean =
    kSyncShort +
    " --set roles.validators=0 --set zeno.rule=mean --set attack.kind=none --set attack.byzantine=[]";

int total_judged(const nlohmann::json& r) {
  return r["validation"]["judged"].get<int>();
}

TEST(ZenoModes, ParticipationRateAgreesOnTheSubsetWithoutMessages) {
  // Two of four workers per round. The updates invariant expects exactly the planned pushes: a worker
  // pushing when the servers did not expect it, or a round waiting for one that sat out, fails it (or
  // hangs the round, and the run fails).
  const auto full = sim("zeno-m-part1", "scenarios/zeno_sync_1v.toml", kSyncMean);
  const auto half =
      sim("zeno-m-part", "scenarios/zeno_sync_1v.toml", kSyncMean + " --set train.participation=0.5");
  ASSERT_TRUE(half["completed"].get<bool>()) << half["failure"];
  EXPECT_EQ(half["invariants"]["violation_count"], 0) << half["invariants"].dump();
  // Half the pushes (each counted once, plus the end-of-run check).
  const int all = full["invariants"]["by_invariant"]["updates"]["checked"].get<int>();
  EXPECT_EQ(half["invariants"]["by_invariant"]["updates"]["checked"].get<int>() - 1, (all - 1) / 2);
  EXPECT_NE(half["model_digest"], full["model_digest"]);
  EXPECT_GT(half["accuracy"]["final"].get<double>(), 0.5);
  // With a validator: it judges exactly the participants, two per round, each worker some rounds.
  const auto judged = sim("zeno-m-part-v", "scenarios/zeno_sync_1v.toml",
                          kSyncShort + " --set attack.byzantine=[1] --set train.participation=0.5");
  ASSERT_TRUE(judged["completed"].get<bool>()) << judged["failure"];
  EXPECT_EQ(judged["invariants"]["violation_count"], 0) << judged["invariants"].dump();
  EXPECT_EQ(total_judged(judged), 80) << judged["validation"].dump();
  for (int w = 0; w < 4; ++w) {
    const int n = judged["validation"]["per_worker"][static_cast<std::size_t>(w)][0].get<int>();
    EXPECT_GT(n, 5) << judged["validation"].dump();
    EXPECT_LT(n, 35) << judged["validation"].dump();
  }
  EXPECT_EQ(accepted(judged, 1), 0);
}

TEST(ZenoModes, DropRateSkipsTensorsAndStillCompletesEveryRound) {
  const auto full = sim("zeno-m-drop0", "scenarios/zeno_sync_1v.toml", kSyncMean);
  const auto drop =
      sim("zeno-m-drop", "scenarios/zeno_sync_1v.toml", kSyncMean + " --set train.drop_rate=0.3");
  ASSERT_TRUE(drop["completed"].get<bool>()) << drop["failure"];
  EXPECT_EQ(drop["invariants"]["violation_count"], 0) << drop["invariants"].dump();
  // About 30 % of the pushes are skipped.
  const int all = full["invariants"]["by_invariant"]["updates"]["checked"].get<int>();
  const int kept = drop["invariants"]["by_invariant"]["updates"]["checked"].get<int>();
  EXPECT_LT(kept, all * 0.8) << kept << " of " << all;
  EXPECT_GT(kept, all * 0.6) << kept << " of " << all;
  EXPECT_NE(drop["model_digest"], full["model_digest"]);
  EXPECT_GT(drop["accuracy"]["final"].get<double>(), 0.5);
  // One participant per round and 30 % drops: many keys get no push at all and are applied as zero
  // updates on their first pull.
  const auto sparse = sim("zeno-m-drop-sparse", "scenarios/zeno_sync_1v.toml",
                          kSyncMean + " --set train.drop_rate=0.3 --set train.participation=0.25");
  ASSERT_TRUE(sparse["completed"].get<bool>()) << sparse["failure"];
  EXPECT_EQ(sparse["invariants"]["violation_count"], 0) << sparse["invariants"].dump();
  // With a validator: every participant judged every round, dropped tensors as zero updates.
  const auto judged = sim("zeno-m-drop-v", "scenarios/zeno_sync_1v.toml",
                          kSyncShort + " --set attack.byzantine=[1] --set train.drop_rate=0.1");
  ASSERT_TRUE(judged["completed"].get<bool>()) << judged["failure"];
  EXPECT_EQ(judged["invariants"]["violation_count"], 0) << judged["invariants"].dump();
  EXPECT_EQ(total_judged(judged), 160);
  const auto bad = run_pstwin("check scenarios/zeno_async_1v.toml --set train.drop_rate=0.1");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("train.drop_rate"), std::string::npos) << bad.output;
}

// 8 workers (ranks 1, 4, 6 Byzantine when attacking), 2 servers, plain mean on the servers, 60 rounds.
const std::string kMean8 =
    " --set roles.validators=0 --set zeno.rule=mean --set workload.iterations=60 --set train.eval_every=0";

TEST(ZenoModes, WorkerMomentumLearnsTheSameModelAndShrinksAlie) {
  const auto server =
      sim("zeno-m-wm-none0", "scenarios/zeno_sync_1v.toml", kMean8 + " --set attack.kind=none");
  const auto worker = sim("zeno-m-wm-none1", "scenarios/zeno_sync_1v.toml",
                          kMean8 + " --set attack.kind=none --set train.worker_momentum=true");
  ASSERT_TRUE(worker["completed"].get<bool>()) << worker["failure"];
  EXPECT_EQ(worker["invariants"]["violation_count"], 0) << worker["invariants"].dump();
  // The mean of the workers' momenta is the servers' momentum of the mean: the same model up to float
  // rounding (momentum kept on both sides, or on neither, would train a different one).
  EXPECT_NE(worker["model_digest"], server["model_digest"]);
  EXPECT_NEAR(worker["accuracy"]["final"].get<double>(), server["accuracy"]["final"].get<double>(), 0.005)
      << "worker " << worker["accuracy"].dump() << "\nserver " << server["accuracy"].dump();
  // ALIE hides in the honest workers' spread; momenta spread far less than gradients, so the same attack
  // moves the mean much less (measured: 0.762 with the servers' momentum, 0.803 with the workers').
  const auto alie = sim("zeno-m-wm-alie0", "scenarios/zeno_sync_1v.toml", kMean8 + " --set attack.kind=alie");
  const auto alie_wm = sim("zeno-m-wm-alie1", "scenarios/zeno_sync_1v.toml",
                           kMean8 + " --set attack.kind=alie --set train.worker_momentum=true");
  ASSERT_TRUE(alie_wm["completed"].get<bool>()) << alie_wm["failure"];
  EXPECT_GT(alie_wm["accuracy"]["final"].get<double>(), alie["accuracy"]["final"].get<double>() + 0.02)
      << "worker momentum " << alie_wm["accuracy"].dump() << "\nserver momentum " << alie["accuracy"].dump();
  const auto bad = run_pstwin("check scenarios/quickstart.toml --set train.worker_momentum=true");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("train.worker_momentum"), std::string::npos) << bad.output;
}

// ZenoPS's rho sweep goes below zero (its figure 7), and so may Zeno's rho (favouring long updates,
// ROBUSTNESS.md); below -1 is refused naming the field.
TEST(ZenoModes, ZenoPsAndZenoRhoMayBeNegative) {
  for (const std::string field : {"zeno.zenops_rho", "zeno.rho"}) {
    const std::string base = "check scenarios/zeno_rho_sweep.toml --set " + field + "=";
    const auto ok = run_pstwin(base + "-0.1");
    EXPECT_EQ(ok.exit_code, 0) << ok.output;
    const auto low = run_pstwin(base + "-2");
    EXPECT_EQ(low.exit_code, 2) << low.output;
    EXPECT_NE(low.output.find(field), std::string::npos) << low.output;
  }
}

// A robust rule on the servers says what it kept of each worker, in `selection`: Krum (f = 2) over 8
// workers, ranks 1 and 4 flipping their sign x4, keeps one gradient per key and round and never an
// attacker's; the counts add up; the plain mean judges nothing. A real job's servers judge the same
// gradients (the sync model is the simulator's) and `pstwin run` sums their counts to the same section.
TEST(ZenoModes, ServerRulesReportWhatTheyKeptOfEachWorker) {
  const std::string sets =
      " --set roles.validators=0 --set zeno.rule=krum --set zeno.krum_byzantine=2 --set "
      "attack.byzantine=[1,4]"
      " --set workload.iterations=12 --set train.eval_every=0 --set ps.connect_timeout=60";
  const auto r = sim("zeno-m-sel-krum", "scenarios/zeno_sync_1v.toml", sets);
  ASSERT_TRUE(r.contains("selection")) << r.dump();
  const auto& s = r["selection"];
  EXPECT_EQ(s["rule"], "krum");
  const int judged = s["judged"].get<int>();
  ASSERT_EQ(judged % (8 * 12), 0) << s.dump();  // 8 workers x 12 rounds x the keys
  const int rounds = judged / 8;
  EXPECT_EQ(s["accepted"].get<int>(), rounds) << s.dump();  // one chosen per key and round
  EXPECT_EQ(s["verdicts"]["accepted"].get<int>() + s["verdicts"]["dropped"].get<int>(), judged) << s.dump();
  ASSERT_EQ(s["per_worker"].size(), 8u);
  int accepted = 0;
  for (int w = 0; w < 8; ++w) {
    const auto& worker = s["per_worker"][static_cast<std::size_t>(w)];
    EXPECT_EQ(worker["judged"].get<int>(), rounds) << worker.dump();
    accepted += worker["accepted"].get<int>();
    // Krum's chosen one carries the whole update: a mean share of 8 x its accepted fraction.
    EXPECT_NEAR(worker["mean_share"].get<double>(), 8.0 * worker["accepted"].get<double>() / rounds, 1e-6)
        << worker.dump();
    if (w == 1 || w == 4) {
      EXPECT_EQ(worker["accepted"], 0) << "Krum kept an attacker's gradient: " << s.dump();
    }
  }
  EXPECT_EQ(accepted, rounds);
  const auto mean = sim("zeno-m-sel-mean", "scenarios/zeno_sync_1v.toml", kMean8);
  EXPECT_FALSE(mean.contains("selection")) << mean["selection"].dump();

  const auto real = fresh_dir("zeno-m-sel-real");
  std::vector<std::string> args{"run", "scenarios/zeno_sync_1v.toml", "-q", "--out", real.string()};
  std::istringstream words(sets);
  for (std::string word; words >> word;) args.push_back(word);
  testing::ChildProcess run(args, fresh_dir("zeno-m-sel-real-log") / "log");
  ASSERT_EQ(run.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(300)), 0) << run.output();
  const auto rr = read_json(real / "results.json");
  EXPECT_EQ(rr["model_digest"], r["model_digest"]);
  EXPECT_EQ(rr["selection"], s) << "real " << rr["selection"].dump() << "\nsim " << s.dump();
}

}  // namespace
}  // namespace pstwin
