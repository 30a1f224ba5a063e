// The `pstwin` command line as a user meets it, through the real binary: --version, -q on every
// subcommand, the end of a simulation at sim.max_time, the per-invariant violation summary, and
// what explore says when the seed changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::fresh_dir;
using testing::read_json;
using testing::read_text;
using testing::run_pstwin;
using testing::run_shell;

// stdout and stderr of one `pstwin ARGS`, apart.
struct Split {
  int exit_code = -1;
  std::string out;
  std::string err;
};

Split run_split(const std::string& args, const std::filesystem::path& dir) {
  const auto err = dir / "stderr.txt";
  const auto r = run_shell(std::string(PSTWIN_BINARY) + " " + args + " 2>" + err.string());
  return {r.exit_code, r.output, testing::without_sanitizer_notices(read_text(err))};
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

TEST(Cli, VersionIsTheProjectVersion) {
  // The version CMake's project() declares, read from the source tree this binary was built from.
  const std::string cmake = read_text(std::filesystem::path(PSTWIN_SOURCE_DIR) / "CMakeLists.txt");
  std::smatch declared;
  ASSERT_TRUE(std::regex_search(cmake, declared, std::regex(R"(project\(pstwin VERSION ([0-9.]+))")));
  const auto r = run_pstwin("--version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "pstwin " + declared[1].str() + "\n");
}

// -q: nothing on success but what the command is for; a failure still reaches stderr, same status.
TEST(Cli, QuietPrintsNothingOnSuccessOnEverySubcommand) {
  const auto dir = fresh_dir("quiet");
  const std::string sets = " --set workload.iterations=2 --set roles.workers=2 --set roles.servers=1";
  for (const std::string command : {"sim", "run", "explore"}) {
    SCOPED_TRACE(command);
    const std::string out = (dir / command).string();
    const std::string extra = command == "explore" ? " --seeds 2" : " --out " + out;
    const auto quiet = run_split(command + " scenarios/quickstart.toml -q" + sets + extra, dir);
    EXPECT_EQ(quiet.exit_code, 0) << quiet.out << quiet.err;
    EXPECT_EQ(quiet.out, "");
    EXPECT_EQ(quiet.err, "");
    if (command != "explore") {
      EXPECT_TRUE(read_json(dir / command / "results.json")["completed"].get<bool>());
    }
    // Without -q the same command does print its summary.
    const auto loud = run_split(command + " scenarios/quickstart.toml" + sets + extra, dir);
    EXPECT_EQ(loud.exit_code, 0) << loud.out << loud.err;
    EXPECT_NE(loud.out, "");
  }
  // check is for printing the scenario: -q keeps it.
  const auto check = run_split("check scenarios/quickstart.toml -q", dir);
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE(check.out.find("name = \"quickstart\""), std::string::npos) << check.out;
  EXPECT_EQ(check.err, "");
  // A failed run under -q: its summary (failure, violations) on stderr, nothing on stdout, exit 1.
  const auto failed =
      run_split("sim scenarios/crossed_line.toml -q --set staging.naming=legacy-key-only --out " +
                    (dir / "failed").string(),
                dir);
  EXPECT_EQ(failed.exit_code, 1) << failed.out << failed.err;
  EXPECT_EQ(failed.out, "");
  EXPECT_NE(failed.err.find("[aggregates]"), std::string::npos) << failed.err;
  const auto explored =
      run_split("explore scenarios/crossed_line.toml -q --seeds 2 --set staging.naming=legacy-key-only", dir);
  EXPECT_EQ(explored.exit_code, 1) << explored.out << explored.err;
  EXPECT_EQ(explored.out, "");
  EXPECT_NE(explored.err.find("replay: pstwin sim"), std::string::npos) << explored.err;
}

// A simulation still running at sim.max_time ends there cleanly: results.json says it did not
// complete, where it stopped and why; exit status 1, no abort.
TEST(Cli, SimulationEndsCleanlyAtItsTimeLimit) {
  const auto dir = fresh_dir("max-time");
  const auto r = run_pstwin("sim scenarios/quickstart.toml --set sim.max_time=50ms --out " + dir.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto results = read_json(dir / "results.json");
  EXPECT_FALSE(results["completed"].get<bool>());
  const std::string failure = results["failure"];
  EXPECT_NE(failure.find("time limit 0.05 s (sim.max_time) reached"), std::string::npos) << failure;
  // The iterations every worker finished by then are reported, and the failure counts them.
  const auto iterations = results["iterations"].size();
  EXPECT_NE(failure.find("after " + std::to_string(iterations) + " of 5 iterations"), std::string::npos)
      << failure;
  EXPECT_NEAR(results["run_time_s"].get<double>(), 0.05, 1e-9);
  EXPECT_NE(r.output.find("DID NOT COMPLETE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(failure), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "trace.json"));
  // explore's forked children end the same way.
  const auto explored = run_pstwin("explore scenarios/quickstart.toml --seeds 1 --set sim.max_time=50ms");
  EXPECT_EQ(explored.exit_code, 1) << explored.output;
  EXPECT_NE(explored.output.find("time limit 0.05 s (sim.max_time) reached"), std::string::npos)
      << explored.output;
}

// Many violations: a few per invariant, then how many more and where they all are.
TEST(Cli, SummaryListsAFewViolationsPerInvariantAndCountsTheRest) {
  const auto dir = fresh_dir("many-violations");
  const auto r = run_pstwin(
      "sim scenarios/crossed_line.toml --seed 0 --set staging.naming=legacy-key-only "
      "--set workload.iterations=30 --out " +
      dir.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const auto results = read_json(dir / "results.json");
  std::size_t largest = 0;
  for (const auto& [name, tally] : results["invariants"]["by_invariant"].items()) {
    const std::size_t violated = tally["violated"];
    largest = std::max(largest, violated);
    const std::size_t listed = count_of(r.output, "    [" + name + "] ");
    EXPECT_EQ(listed, std::min<std::size_t>(violated, 3)) << name << "\n" << r.output;
    const std::string more = "    ... and " + std::to_string(violated - 3) + " more [" + name +
                             "] violations (see " + (dir / "results.json").string() + ")";
    if (violated > 3) {
      EXPECT_NE(r.output.find(more), std::string::npos) << more << "\n" << r.output;
    }
  }
  ASSERT_GT(largest, 3u) << "the scenario no longer crosses enough aggregates to test the summary";
}

// Seeds feed only the perturbations (and training data): without any, every seed is one schedule.
TEST(Cli, ExploreSaysWhenEverySeedRunsTheSameSchedule) {
  const std::string note = "every seed runs the same schedule";
  const auto same = run_pstwin("explore scenarios/quickstart.toml --seeds 3 --set workload.iterations=2");
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("3 clean"), std::string::npos) << same.output;
  EXPECT_NE(same.output.find(note), std::string::npos) << same.output;
  EXPECT_NE(same.output.find("perturbation."), std::string::npos) << same.output;
  // With jitter each seed is another interleaving: no note.
  const auto jittered = run_pstwin(
      "explore scenarios/quickstart.toml --seeds 3 --set workload.iterations=2 "
      "--set perturbation.delivery_jitter=20us");
  EXPECT_EQ(jittered.exit_code, 0) << jittered.output;
  EXPECT_EQ(jittered.output.find(note), std::string::npos) << jittered.output;
}

// explore --help describes explore.json as it is written: a JSON array, one object per seed.
TEST(Cli, ExploreHelpDescribesExploreJson) {
  const auto help = run_pstwin("explore --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_EQ(help.output.find("one line per seed"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("a JSON array with one object per seed"), std::string::npos) << help.output;
  const auto dir = fresh_dir("explore-json");
  const auto r = run_pstwin("explore scenarios/crossed_line.toml --seeds 2 -q --out " + dir.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto json = read_json(dir / "explore.json");
  ASSERT_TRUE(json.is_array()) << json.dump();
  ASSERT_EQ(json.size(), 2u);
  for (const auto& entry : json)
    for (const char* field : {"seed", "ok", "violation_count", "first_violation", "replay"})
      EXPECT_TRUE(entry.contains(field)) << field << " in " << entry.dump();
}

// Bad input: exit 2, the field or option named on stderr, nothing on stdout, and refused before the run
// starts, whatever it would have cost. The 60 s bound is a hang guard, not a speed target: each of
// these runs, if started, takes tens of minutes or all memory; a refusal takes well under a second
// (3 s under ASan on a loaded machine).
struct Refusal {
  std::string args;
  std::string names;
};

void expect_refused(const Refusal& refusal, const std::filesystem::path& dir) {
  SCOPED_TRACE(refusal.args);
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_split(refusal.args, dir);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(refusal.names), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_LT(seconds, 60.0) << "the run was started instead of refused";
}

TEST(Cli, WhatCannotFitIsRefusedUpFrontNamingTheField) {
  const auto dir = fresh_dir("cannot-fit");
  const std::string out = " --out " + (dir / "out").string();
  for (const std::string command : {"check", "sim"}) {
    for (const auto& [set, names] : std::vector<std::pair<std::string, std::string>>{
             {"roles.workers=10000000", "roles.workers = 10000000: a run would need about "},
             {"cluster.hosts=1000000000", "cluster.hosts = 1000000000: a run would need about "},
             {"workload.tensor_bytes='[\"10GB\"]'", "workload.tensor_bytes = [\"10GB\"]: a run would need"},
             {"workload.tensor_bytes=1000000000000000", "workload.tensor_bytes = [1000000000000000]: a run"},
             {"sim.stack_size_kb=1000000000", "sim.stack_size_kb = 1000000000: at most 1048576"},
             {"sim.simgrid_config='[\"network/model:Foo\"]'",
              "sim.simgrid_config = [\"network/model:Foo\"]: SimGrid refuses it: Model 'Foo' is invalid!"},
             {"sim.simgrid_config='[\"network/optim:Nope\"]'",
              "sim.simgrid_config = [\"network/optim:Nope\"]"},
             {"sim.simgrid_config='[\"no-such-setting:1\"]'", "sim.simgrid_config = [\"no-such-setting:1\"]"},
             {"name=../../x", "name = \"../../x\": may not contain '/'"},
         })
      expect_refused(
          {command + " scenarios/quickstart.toml --set " + set + (command == "sim" ? out : ""), names}, dir);
  }
  // None of the refused sims wrote anything, and ../../x made nothing outside its folder.
  EXPECT_FALSE(std::filesystem::exists(dir / "out" / "results.json"));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(PSTWIN_SOURCE_DIR) / ".." / "x"));
}

TEST(Cli, NamesAreEscapedWhenPrinted) {
  const auto dir = fresh_dir("escaped-name");
  const auto r = run_split("check scenarios/quickstart.toml --set \"name=$(printf 'red\\033[31m')\"", dir);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("name = \"red\\u001b[31m\""), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << "a raw terminal escape reached the terminal";
}

TEST(Cli, ScenarioFilesThatAreNotRegularFilesAreRefusedAtOnce) {
  const auto dir = fresh_dir("not-regular");
  expect_refused({"check /dev/zero", "/dev/zero: not a regular file"}, dir);
  expect_refused({"sim /dev/zero --out " + (dir / "out").string(), "/dev/zero: not a regular file"}, dir);
  // A pipe nobody writes to: opening it would block for ever.
  const auto fifo = dir / "scenario.fifo";
  ASSERT_EQ(run_shell("mkfifo " + fifo.string()).exit_code, 0);
  expect_refused({"check " + fifo.string(), fifo.string() + ": not a regular file"}, dir);
}

TEST(Cli, OutputDirectoryIsCheckedBeforeTheRun) {
  const auto dir = fresh_dir("out-checked");
  const std::string sets = " --set workload.iterations=1";
  for (const std::string command : {"sim", "run"}) {
    expect_refused({command + " scenarios/quickstart.toml --out /dev/null" + sets,
                    "--out /dev/null: exists and is not a directory"},
                   dir);
    expect_refused({command + " scenarios/quickstart.toml --out /proc/pstwin-out" + sets,
                    "--out /proc/pstwin-out: cannot create it"},
                   dir);
  }
  expect_refused({"explore scenarios/quickstart.toml --seeds 2 --out /dev/null" + sets,
                  "--out /dev/null: exists and is not a directory"},
                 dir);
  // A directory is made when missing, and the run writes there.
  const auto fresh = dir / "a" / "b";
  const auto ok = run_split("sim scenarios/quickstart.toml -q --out " + fresh.string() + sets, dir);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(std::filesystem::exists(fresh / "results.json"));
}

TEST(Cli, SeedsOutOfRangeAreRefused) {
  const auto dir = fresh_dir("seeds");
  for (const std::string seed : {"-1", "18446744073709551616", "1e3", "0x10", ""}) {
    expect_refused({"sim scenarios/quickstart.toml --seed '" + seed + "'", "--seed"}, dir);
    expect_refused({"run scenarios/quickstart.toml --seed '" + seed + "'", "--seed"}, dir);
    expect_refused(
        {"explore scenarios/quickstart.toml --seeds 2 --first-seed '" + seed + "'", "--first-seed"}, dir);
  }
  expect_refused({"explore scenarios/quickstart.toml --seeds -1", "--seeds"}, dir);
  expect_refused({"explore scenarios/quickstart.toml --seeds 100000000", "--seeds"}, dir);
  expect_refused({"explore scenarios/quickstart.toml --seeds 2 --first-seed 18446744073709551615",
                  "the last seed would pass 18446744073709551615"},
                 dir);
  expect_refused({"check scenarios/quickstart.toml --set seed=-1", "seed = -1: must not be negative"}, dir);
  // The largest seed is a seed.
  const auto max = run_split("sim scenarios/quickstart.toml -q --seed 18446744073709551615 --out " +
                                 (dir / "max").string() + " --set workload.iterations=1",
                             dir);
  EXPECT_EQ(max.exit_code, 0) << max.err;
  EXPECT_EQ(read_json(dir / "max" / "results.json")["seed"].get<std::uint64_t>(), 18446744073709551615u);
}

// `pstwin node` names a misspelled variable or a bad DMLC_ENABLE_RDMA (exit 2) and warns about what it
// ignores, before it binds or connects anything.
TEST(Cli, NodeRefusesMisspelledAndUnsupportedVariables) {
  const auto dir = fresh_dir("node-env");
  const std::string worker =
      "env DMLC_ROLE=worker DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=1 DMLC_NUM_WORKER=2 "
      "DMLC_NUM_SERVER=1 DMLC_WORKER_ID=0 ";
  for (const auto& [var, names] : std::vector<std::pair<std::string, std::string>>{
           {"DMLC_PS_VAN_TYP=epoll",
            "DMLC_PS_VAN_TYP=\"epoll\": not a variable pstwin reads; did you mean "
            "DMLC_PS_VAN_TYPE?"},
           {"DMLC_ENABLE_RDMA=yes", "DMLC_ENABLE_RDMA=\"yes\": expected 0 or 1"},
       }) {
    SCOPED_TRACE(var);
    // Exit 2 naming the variable: refused before connecting (an unreachable scheduler is exit 1).
    const auto r = run_shell(worker + var + " " + PSTWIN_BINARY + " node scenarios/quickstart.toml");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(names), std::string::npos) << r.output;
  }
  // An ignored variable is a warning; here the bad role then stops the node.
  const auto r = run_shell(worker + "BYTEPS_SCHEDULING_CREDIT=8 DMLC_ROLE=wroker " + PSTWIN_BINARY +
                           " node scenarios/quickstart.toml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("pstwin node: warning: BYTEPS_SCHEDULING_CREDIT=\"8\" is not supported yet (use "
                          "--set ps.scheduling_credit=N); ignored"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("DMLC_ROLE=\"wroker\""), std::string::npos) << r.output;
}

// A missed performance bound is counted apart from correctness (safety) violations, in the summary and
// in explore.json's class.
TEST(Cli, ExploreCountsMissedBoundsApartFromSafetyViolations) {
  const auto dir = fresh_dir("explore-classes");
  // 4 servers of 8 workers run about 1.4x their bound (the scheduling credit), beyond its 5 %.
  const auto r = run_pstwin(
      "explore scenarios/saturation_8w2s.toml --seeds 1 --first-seed 1 --set roles.servers=4 "
      "--set workload.iterations=3 --out " +
      dir.string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("0 with safety violations, 1 missing only a performance bound, 0 clean"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(read_json(dir / "explore.json")[0]["class"], "performance");
  const auto crossed =
      run_pstwin("explore scenarios/crossed_line.toml --seeds 1 --set staging.naming=legacy-key-only --out " +
                 dir.string());
  EXPECT_EQ(crossed.exit_code, 1) << crossed.output;
  EXPECT_NE(crossed.output.find("1 with safety violations, 0 missing only a performance bound, 0 clean"),
            std::string::npos)
      << crossed.output;
  EXPECT_EQ(read_json(dir / "explore.json")[0]["class"], "safety");
}

// --shard I/N: seed FIRST+k runs on shard k mod N, and `pstwin merge` of the shards' files writes the
// explore.json one unsharded explore writes (a swarm's too, but for its wall times and jobs).
TEST(Cli, ExploreShardsMergeIntoTheUnshardedExplore) {
  const auto dir = fresh_dir("explore-shards");
  for (const bool swarm : {false, true}) {
    SCOPED_TRACE(swarm ? "swarm" : "plain");
    const std::string args = "explore scenarios/crossed_line.toml -q --seeds 5 --first-seed 3" +
                             std::string(swarm ? " --swarm" : "");
    const std::string tag = swarm ? "-swarm" : "";
    const auto whole = run_pstwin(args + " --out " + (dir / ("whole" + tag)).string());
    ASSERT_LE(whole.exit_code, 1) << whole.output;
    const auto shards = dir / ("shards" + tag);
    for (const std::string shard : {"0/3", "2/3", "1/3"}) {
      const auto r = run_pstwin(args + " --shard " + shard + " --out " + shards.string());
      ASSERT_LE(r.exit_code, 1) << r.output;
    }
    const auto two = read_json(shards / "explore-shard-2-of-3.json");
    ASSERT_EQ(two["runs"].size(), 1u) << two.dump();  // seeds 3..7: k = 2 is seed 5
    EXPECT_EQ(two["runs"][0]["seed"], 5);
    const auto merged =
        run_pstwin("merge -q " + shards.string() + " --out " + (dir / ("merged" + tag)).string());
    ASSERT_EQ(merged.exit_code, 0) << merged.output;
    auto expected = read_json(dir / ("whole" + tag) / "explore.json");
    auto got = read_json(dir / ("merged" + tag) / "explore.json");
    if (swarm)
      for (auto* doc : {&expected, &got})
        for (const char* timing : {"wall_s", "seeds_per_s", "jobs"}) doc->erase(timing);
    EXPECT_EQ(got, expected);
    if (!swarm) {
      EXPECT_EQ(read_text(dir / "merged" / "explore.json"), read_text(dir / "whole" / "explore.json"));
    }
  }
}

TEST(Cli, SweepShardsMergeIntoTheUnshardedSweep) {
  const auto dir = fresh_dir("sweep-shards");
  const std::string args =
      "sweep scenarios/quickstart.toml -q --no-plots --set workload.iterations=2 --grid roles.workers=1,2 "
      "--seeds 2";
  ASSERT_EQ(run_pstwin(args + " --out " + (dir / "whole").string()).exit_code, 0);
  // Shard 2 of 3 holds run 2 only (roles.workers=2, the first seed); mpirun's rank and size name the shard.
  for (const std::string shard : {"0", "1", "2"}) {
    const auto r =
        run_shell("env OMPI_COMM_WORLD_RANK=" + shard + " OMPI_COMM_WORLD_SIZE=3 " + PSTWIN_BINARY + " " +
                  args + " --shard launcher --out " + (dir / "shards").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "shards" / "sweep.csv"));
  const auto merged =
      run_pstwin("merge -q " + (dir / "shards").string() + " --out " + (dir / "merged").string());
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  EXPECT_EQ(read_text(dir / "merged" / "sweep.csv"), read_text(dir / "whole" / "sweep.csv"));
  EXPECT_EQ(read_text(dir / "merged" / "sweep.json"), read_text(dir / "whole" / "sweep.json"));
  // A missing shard is named, with how to make it.
  std::filesystem::remove(dir / "shards" / "sweep-shard-1-of-3.json");
  const auto missing =
      run_pstwin("merge -q " + (dir / "shards").string() + " --out " + (dir / "again").string());
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("no sweep-shard-1-of-3.json; run --shard I/3 for each missing I"),
            std::string::npos)
      << missing.output;
}

TEST(Cli, BadShardsAreRefusedNamingTheOption) {
  const auto dir = fresh_dir("bad-shards");
  for (const auto& [shard, names] : std::vector<std::pair<std::string, std::string>>{
           {"3/3", "--shard 3/3: expected shard I of N with 0 <= I < N"},
           {"1", "--shard 1: expected I/N"},
           {"a/b", "--shard a/b: expected shard I of N"},
           {"launcher", "--shard launcher: neither OMPI_COMM_WORLD_RANK"}})
    expect_refused({"explore scenarios/quickstart.toml --seeds 2 --shard " + shard, names}, dir);
}

}  // namespace
}  // namespace pstwin
