// ZenoPS validators, attacks and robust rules wired into the parameter server, end to end
// through the pstwin binary on real Fashion-MNIST: the validator drops sign-flipped updates and keeps
// honest ones, the (round, worker, tensor) tags refuse duplicated candidates without disturbing the
// training, two validators split the workers by rank, attacks hit exactly the configured workers, and
// sync curves with a validator are identical in the simulator and between real processes.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "realnet/node_env.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::fresh_dir;
using testing::read_json;
using testing::run_pstwin;

// A short job: 4 workers (rank 1 Byzantine), 1 server, 1 validator, 40 iterations.
const std::string kShort =
    " -q --set roles.workers=4 --set roles.servers=1 --set workload.iterations=40 --set train.eval_every=20"
    " --set zeno.validator_samples=1000 --set attack.byzantine=[1]";

// Exit status 1 is expected when the run reports invariant violations.
nlohmann::json sim(const std::string& name, const std::string& sets, int exit_code = 0) {
  const auto dir = fresh_dir(name);
  const auto run = run_pstwin("sim scenarios/zeno_sync_1v.toml" + kShort + sets + " --out " + dir.string());
  EXPECT_EQ(run.exit_code, exit_code) << run.output;
  return read_json(dir / "results.json");
}

std::pair<int, int> judged_accepted(const nlohmann::json& r, int worker) {
  const auto& w = r["validation"]["per_worker"][static_cast<std::size_t>(worker)];
  return {w[0].get<int>(), w[1].get<int>()};
}

TEST(Validator, AcceptsHonestAndDropsSignFlippedPushes) {
  const auto r = sim("zeno-v-signflip", " --set attack.byzantine=[1]");
  ASSERT_TRUE(r["completed"].get<bool>()) << r["failure"];
  EXPECT_EQ(r["invariants"]["violation_count"], 0) << r["invariants"].dump();
  EXPECT_GT(r["invariants"]["by_invariant"]["tags"]["checked"].get<int>(), 0);
  ASSERT_EQ(r["validation"]["per_worker"].size(), 4u) << r["validation"].dump();
  // The Byzantine worker's -4 x gradient fails <u,v> > 0 every round; honest ones pass nearly always.
  EXPECT_EQ(judged_accepted(r, 1), std::make_pair(40, 0));
  for (int w : {0, 2, 3}) {
    const auto [judged, accepted] = judged_accepted(r, w);
    EXPECT_EQ(judged, 40);
    EXPECT_GE(accepted, 28) << "worker " << w;
  }
  // It learns despite the attacker; plain mean under the same attack learns less.
  const auto mean = sim("zeno-v-signflip-mean",
                        " --set attack.byzantine=[1] --set zeno.rule=mean --set roles.validators=0");
  ASSERT_TRUE(mean["completed"].get<bool>()) << mean["failure"];
  EXPECT_FALSE(mean.contains("validation"));
  EXPECT_GT(r["accuracy"]["final"].get<double>(), 0.6);
  EXPECT_GT(r["accuracy"]["final"].get<double>(), mean["accuracy"]["final"].get<double>() + 0.05)
      << "zenops " << r["accuracy"].dump() << "\nmean " << mean["accuracy"].dump();
}

TEST(Validator, ADivergedRunFailsWithTheRuleErrorInsteadOfAborting) {
  // A learning rate of 1e6 blows the model up within two rounds; the validator's reference v is then
  // non-finite and the rule refuses it. The run must end as a failed run naming the cause (it used to
  // abort the process from inside the compute stage).
  const auto r = sim("zeno-v-diverged", " --set attack.kind=none --set train.learning_rate=1e6", 1);
  ASSERT_FALSE(r["completed"].get<bool>());
  const auto failure = r["failure"].get<std::string>();
  EXPECT_NE(failure.find("could not judge round"), std::string::npos) << failure;
  EXPECT_NE(failure.find("NaN or Inf"), std::string::npos) << failure;
}

TEST(Validator, TagsRefuseDuplicatedCandidatesAndKeepRoundsAligned) {
  const auto clean = sim("zeno-v-clean", "");
  const auto dup = sim("zeno-v-dup", " --set zeno.duplicate_candidates=true", 1);
  ASSERT_TRUE(dup["completed"].get<bool>()) << dup["failure"];
  const auto& tags = dup["invariants"]["by_invariant"]["tags"];
  // Every forwarded push was sent twice: each second copy is refused, none overwrites the first.
  EXPECT_GT(tags["violated"].get<int>(), 0);
  EXPECT_EQ(tags["violated"].get<int>(),
            tags["checked"].get<int>() - clean["invariants"]["by_invariant"]["tags"]["checked"].get<int>())
      << tags.dump();
  EXPECT_EQ(dup["invariants"]["violation_count"], tags["violated"]);
  EXPECT_NE(dup["invariants"]["violations"][0]["detail"].get<std::string>().find("second push for this slot"),
            std::string::npos);
  // The refused copies changed nothing: same decisions, same model.
  EXPECT_EQ(dup["validation"], clean["validation"]);
  EXPECT_EQ(dup["accuracy"]["curve"].size(), clean["accuracy"]["curve"].size());
  EXPECT_EQ(dup["model_digest"], clean["model_digest"]);
}

TEST(Validator, ValidationOnlyTrainsOnTheValidatorsDataAndIgnoresEveryWorker) {
  // ZenoPS's "validation only" baseline: the servers apply the validator's own update v alone. The
  // workers still push (and are judged: every one dropped), but no push can move the model, so an
  // attack changes nothing: the model is byte-identical with and without one.
  const std::string rule = " --set zeno.rule=validation-only";
  const auto clean = sim("zeno-v-valonly", rule + " --set attack.kind=none");
  const auto attacked = sim("zeno-v-valonly-flip", rule + " --set attack.kind=sign-flip");
  for (const auto* r : {&clean, &attacked}) {
    ASSERT_TRUE((*r)["completed"].get<bool>()) << (*r)["failure"];
    EXPECT_EQ((*r)["invariants"]["violation_count"], 0) << (*r)["invariants"].dump();
    for (int w = 0; w < 4; ++w) EXPECT_EQ(judged_accepted(*r, w), std::make_pair(40, 0)) << "worker " << w;
  }
  EXPECT_EQ(attacked["model_digest"], clean["model_digest"]);
  EXPECT_EQ(attacked["accuracy"], clean["accuracy"]);
  // It learns from the validator's 1000 images (well above chance, 0.1).
  EXPECT_GT(clean["accuracy"]["final"].get<double>(), 0.5) << clean["accuracy"].dump();
  // ... and differs from training on the workers' data.
  const auto zenops = sim("zeno-v-valonly-zenops", " --set attack.kind=none");
  EXPECT_NE(zenops["model_digest"], clean["model_digest"]);
  // A sync baseline: async validators judge pushes one by one, so the run is refused up front.
  const auto async = run_pstwin("sim scenarios/zeno_sync_1v.toml -q --set ps.mode=async" + rule);
  EXPECT_EQ(async.exit_code, 2) << async.output;
  EXPECT_NE(async.output.find("validation-only"), std::string::npos) << async.output;
  EXPECT_NE(async.output.find("ps.mode = \"sync\""), std::string::npos) << async.output;
}

TEST(Validator, TwoValidatorsSplitTheWorkersByRank) {
  const auto r = sim("zeno-v-two", " --set roles.validators=2 --set attack.byzantine=[1]");
  ASSERT_TRUE(r["completed"].get<bool>()) << r["failure"];
  EXPECT_EQ(r["invariants"]["violation_count"], 0) << r["invariants"].dump();
  int validators = 0;
  for (const auto& n : r["nodes"]) validators += n["role"] == "validator" ? 1 : 0;
  EXPECT_EQ(validators, 2);
  // Each worker judged once per round, by validator (rank % 2): a worker judged by both, or by none,
  // would show up as 0 or 80 judgements; the Byzantine one is still dropped every time.
  for (int w = 0; w < 4; ++w) EXPECT_EQ(judged_accepted(r, w).first, 40) << "worker " << w;
  EXPECT_EQ(judged_accepted(r, 1).second, 0);
  // Which validator judged whom: the candidates come tagged; a worker sent to the wrong validator is a
  // tag violation (none above). Misrouting is refused, not silently judged:
  EXPECT_GT(r["invariants"]["by_invariant"]["tags"]["checked"].get<int>(), 0);
}

TEST(Validator, AttacksHitExactlyTheConfiguredWorkers) {
  // Byzantine ranks 0 and 3: only they are dropped, every round.
  const auto r = sim("zeno-v-ranks", " --set attack.byzantine=[0,3]");
  ASSERT_TRUE(r["completed"].get<bool>()) << r["failure"];
  for (int w = 0; w < 4; ++w) {
    const auto [judged, accepted] = judged_accepted(r, w);
    if (w == 0 || w == 3)
      EXPECT_EQ(accepted, 0) << "worker " << w;
    else
      EXPECT_GE(accepted, judged / 2) << "worker " << w;
  }
  // Per message with probability 0.5: some of each worker's updates are dropped, not all.
  const auto p = sim("zeno-v-prob", " --set attack.probability=0.5 --set attack.byzantine=[]");
  ASSERT_TRUE(p["completed"].get<bool>()) << p["failure"];
  int dropped = 0;
  for (int w = 0; w < 4; ++w) {
    const auto [judged, accepted] = judged_accepted(p, w);
    EXPECT_GT(accepted, 5) << "worker " << w;
    EXPECT_LT(accepted, 35) << "worker " << w;
    dropped += judged - accepted;
  }
  EXPECT_GT(dropped, 50);
  EXPECT_LT(dropped, 110);
}

TEST(Validator, SyncSimAndRealProcessesLearnTheSameModel) {
  // ps.connect_timeout: under load each process loads Fashion-MNIST before it registers.
  const std::string sets =
      " -q --set ps.connect_timeout=60 --set roles.workers=3 --set roles.servers=1 --set "
      "workload.iterations=12 --set train.eval_every=4"
      " --set attack.byzantine=[2] --set zeno.validator_samples=500";
  const auto sim_dir = fresh_dir("zeno-v-sim"), real = fresh_dir("zeno-v-real");
  const auto s = run_pstwin("sim scenarios/zeno_sync_1v.toml" + sets + " --out " + sim_dir.string());
  ASSERT_EQ(s.exit_code, 0) << s.output;
  testing::ChildProcess run(
      {"run", "scenarios/zeno_sync_1v.toml", "-q", "--set", "ps.connect_timeout=60", "--set",
       "roles.workers=3", "--set", "roles.servers=1", "--set", "workload.iterations=12", "--set",
       "train.eval_every=4", "--set", "attack.byzantine=[2]", "--set", "zeno.validator_samples=500", "--out",
       real.string()},
      fresh_dir("zeno-v-real-log") / "log");
  ASSERT_EQ(run.wait_until(std::chrono::steady_clock::now() + std::chrono::seconds(300)), 0) << run.output();
  const auto rs = read_json(sim_dir / "results.json"), rr = read_json(real / "results.json");
  EXPECT_EQ(rr["backend"], "real");
  EXPECT_EQ(rr["invariants"]["violation_count"], 0) << rr["invariants"].dump();
  ASSERT_EQ(rs["accuracy"]["curve"].size(), 4u);
  ASSERT_EQ(rr["accuracy"]["curve"].size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rr["accuracy"]["curve"][i]["iteration"], rs["accuracy"]["curve"][i]["iteration"]);
    EXPECT_EQ(rr["accuracy"]["curve"][i]["accuracy"], rs["accuracy"]["curve"][i]["accuracy"]);
  }
  EXPECT_EQ(rr["model_digest"], rs["model_digest"]);
  // The validator process's decisions reach the merged results.json, the same as the simulator's.
  ASSERT_TRUE(rr.contains("validation")) << rr.dump();
  EXPECT_EQ(rr["validation"]["judged"], 36);  // 3 workers x 12 rounds
  EXPECT_EQ(rr["validation"], rs["validation"]);
}

TEST(Validator, BadZenoFieldsAreBadInputNamingThem) {
  const auto rule = run_pstwin("sim scenarios/zeno_sync_1v.toml -q --set zeno.rule=zenoo");
  EXPECT_EQ(rule.exit_code, 2) << rule.output;
  EXPECT_NE(rule.output.find("zeno.rule"), std::string::npos) << rule.output;
  EXPECT_NE(rule.output.find("zenops"), std::string::npos) << rule.output;  // the choices
  const auto needs = run_pstwin("sim scenarios/zeno_sync_1v.toml -q --set roles.validators=0");
  EXPECT_EQ(needs.exit_code, 2) << needs.output;
  EXPECT_NE(needs.output.find("roles.validators"), std::string::npos) << needs.output;
  const auto rank = run_pstwin("check scenarios/zeno_sync_1v.toml --set attack.byzantine=[8]");
  EXPECT_EQ(rank.exit_code, 2) << rank.output;
  EXPECT_NE(rank.output.find("attack.byzantine"), std::string::npos) << rank.output;
  const auto attack = run_pstwin("sim scenarios/zeno_sync_1v.toml -q --set attack.kind=flip");
  EXPECT_EQ(attack.exit_code, 2) << attack.output;
  EXPECT_NE(attack.output.find("attack.kind"), std::string::npos) << attack.output;
}

using realnet::NodeEnvError;
using realnet::parse_node_env;

std::map<std::string, std::string> validator_env() {
  return {{"DMLC_ROLE", "worker"},           {"DMLC_PS_ROOT_URI", "127.0.0.1"}, {"DMLC_PS_ROOT_PORT", "1234"},
          {"DMLC_NUM_WORKER", "4"},          {"DMLC_NUM_SERVER", "1"},          {"DMLC_NUM_VALIDATOR", "2"},
          {"DMLC_WORKER_TYPE", "validator"}, {"DMLC_VALIDATOR_ID", "1"}};
}

std::string env_error(std::map<std::string, std::string> env, const std::string& name,
                      const std::string& value) {
  if (value.empty())
    env.erase(name);
  else
    env[name] = value;
  try {
    parse_node_env(env);
  } catch (const NodeEnvError& e) {
    return e.what();
  }
  return "";
}

TEST(ValidatorEnv, ParsesAValidatorAndRejectsMalformedVariables) {
  const auto env = parse_node_env(validator_env());
  EXPECT_EQ(env.role, Role::kValidator);
  EXPECT_EQ(env.validator_id, 1);
  EXPECT_EQ(env.num_validators, 2);
  bool found = false;
  for (const auto& [path, value] : env.scenario_overrides())
    found |= path == "roles.validators" && value == "2";
  EXPECT_TRUE(found);
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"DMLC_NUM_VALIDATOR", "x"},
                                                        {"DMLC_NUM_VALIDATOR", "-1"},
                                                        {"DMLC_NUM_VALIDATOR", "5"},  // > DMLC_NUM_WORKER
                                                        {"DMLC_VALIDATOR_ID", "2"},   // >= DMLC_NUM_VALIDATOR
                                                        {"DMLC_VALIDATOR_ID", "1x"},
                                                        {"DMLC_WORKER_TYPE", "validtor"}}) {
    const auto error = env_error(validator_env(), name, value);
    EXPECT_NE(error.find(name + "=\"" + value + "\""), std::string::npos)
        << name << "=" << value << ": " << error;
  }
  EXPECT_NE(env_error(validator_env(), "DMLC_VALIDATOR_ID", "").find("DMLC_VALIDATOR_ID is not set"),
            std::string::npos);
  EXPECT_NE(env_error(validator_env(), "DMLC_NUM_VALIDATOR", "").find("DMLC_NUM_VALIDATOR"),
            std::string::npos);
  auto server = validator_env();
  server["DMLC_ROLE"] = "server";
  EXPECT_NE(env_error(server, "DMLC_WORKER_TYPE", "validator").find("DMLC_ROLE=worker"), std::string::npos);
}

}  // namespace
}  // namespace pstwin
