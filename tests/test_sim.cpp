// End to end through the real pstwin binary and real SimGrid: every scenario the issue names, the
// determinism promise, the crossed-line race found and not found, and the saturation bound.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <regex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "realnet/van.hpp"
#include "scenario/scenario.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::fresh_dir;
using testing::read_json;
using testing::read_text;
using testing::run_pstwin;
using testing::run_shell;

TEST(Sim, QuickstartCompletesAndChecksEveryAggregate) {
  const auto dir = fresh_dir("quickstart");
  // Not -q: the summary is checked.
  const auto run = run_pstwin("sim scenarios/quickstart.toml --out " + dir.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("0 violated"), std::string::npos) << run.output;
  const auto r = read_json(dir / "results.json");
  EXPECT_EQ(r["scenario"], "quickstart");
  EXPECT_EQ(r["backend"], "sim");
  EXPECT_EQ(r["seed"], 1);
  EXPECT_TRUE(r["completed"].get<bool>());
  ASSERT_EQ(r["iterations"].size(), 5u);
  for (const auto& it : r["iterations"])
    EXPECT_GT(it["time_s"].get<double>(), 0.01);  // compute alone is 10 ms
  // 4 tensors in 1 MB partitions = 7 keys; per iteration: 7 aggregates, 4 workers x 7 pushes and pulls.
  EXPECT_GE(r["invariants"]["checked"].get<int>(), 5 * (7 + 4 * 7 + 4 * 7));
  EXPECT_TRUE(r["invariants"]["violations"].empty());
  EXPECT_TRUE(std::regex_match(r["model_digest"].get<std::string>(), std::regex("[0-9a-f]{16}")));
  ASSERT_TRUE(r["bound"].is_object());
  EXPECT_LT(r["bound"]["time_s"].get<double>(), r["mean_iteration_s"].get<double>());
  EXPECT_GT(r["wall_s"].get<double>(), 0);
  // ps-lite ids: servers 8, 10; workers 9, 11, 13, 15.
  std::set<int> ids;
  for (const auto& n : r["nodes"]) ids.insert(n["id"].get<int>());
  EXPECT_EQ(ids, (std::set<int>{8, 9, 10, 11, 13, 15}));
  std::uint64_t server_in = 0;
  for (const auto& l : r["links"])
    if (l["name"] == "h1.down" || l["name"] == "h2.down") server_in += l["bytes"].get<std::uint64_t>();
  // Every worker pushes the whole model (plus a header per partition) once per iteration.
  EXPECT_GE(server_in, 5ull * 4 * 5320000);
  const auto trace = read_json(dir / "trace.json");
  std::set<std::string> categories;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") categories.insert(e["cat"].get<std::string>());
  for (const char* needed : {"compute", "send", "receive", "engine", "copy"})
    EXPECT_TRUE(categories.count(needed)) << needed;
  EXPECT_TRUE(std::filesystem::exists(dir / "resolved.toml"));
}

TEST(Sim, SameSeedGivesIdenticalFilesAndOtherSeedsOtherTimings) {
  const auto a = fresh_dir("det-a"), b = fresh_dir("det-b"), c = fresh_dir("det-c");
  // crossed_line has jitter on every message, task and compute step: the seed decides everything.
  ASSERT_EQ(run_pstwin("sim scenarios/crossed_line.toml -q --seed 5 --out " + a.string()).exit_code, 0);
  ASSERT_EQ(run_pstwin("sim scenarios/crossed_line.toml -q --seed 5 --out " + b.string()).exit_code, 0);
  ASSERT_EQ(run_pstwin("sim scenarios/crossed_line.toml -q --seed 6 --out " + c.string()).exit_code, 0);
  auto ra = read_json(a / "results.json"), rb = read_json(b / "results.json"),
       rc = read_json(c / "results.json");
  ra.erase("wall_s");
  rb.erase("wall_s");
  EXPECT_EQ(ra.dump(), rb.dump());
  EXPECT_EQ(read_text(a / "trace.json"), read_text(b / "trace.json"));
  EXPECT_EQ(read_text(a / "resolved.toml"), read_text(b / "resolved.toml"));
  EXPECT_NE(read_text(a / "trace.json"), read_text(c / "trace.json"));
  EXPECT_NE(ra["iterations"].dump(), rc["iterations"].dump());
  // Sync aggregates do not depend on timing: the final model is the same under every seed.
  EXPECT_EQ(ra["model_digest"], rc["model_digest"]);
}

TEST(Sim, AsyncModeAppliesEveryPushExactlyOnce) {
  const auto dir = fresh_dir("async");
  const auto run = run_pstwin("sim scenarios/async_quickstart.toml -q --out " + dir.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto r = read_json(dir / "results.json");
  EXPECT_TRUE(r["invariants"]["violations"].empty());
  // 7 keys x 4 workers x 5 iterations applied pushes, plus 7 final stores, plus the lost-update check.
  EXPECT_GE(r["invariants"]["checked"].get<int>(), 7 * 4 * 5 + 7 + 1);
  EXPECT_TRUE(r["bound"].is_null());  // no closed form for async
}

// ps.push_pull = fused (the default): one request per partition whose reply is the aggregate. The
// same model as push-then-pull, in sync and async mode, with two messages fewer per pushed partition.
TEST(Sim, FusedPushPullReachesTheSameModelWithHalfTheDataMessages) {
  for (const char* file : {"scenarios/quickstart.toml", "scenarios/async_quickstart.toml"}) {
    SCOPED_TRACE(file);
    const auto separate = fresh_dir("pp-separate"), fused = fresh_dir("pp-fused");
    const auto a =
        run_pstwin(std::string("sim ") + file + " -q --set ps.push_pull=separate --out " + separate.string());
    const auto b =
        run_pstwin(std::string("sim ") + file + " -q --set ps.push_pull=fused --out " + fused.string());
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(b.exit_code, 0) << b.output;
    const auto ra = read_json(separate / "results.json"), rb = read_json(fused / "results.json");
    EXPECT_EQ(ra["model_digest"], rb["model_digest"]);
    EXPECT_EQ(rb["invariants"]["violation_count"], 0);
    EXPECT_EQ(ra["invariants"]["by_invariant"], rb["invariants"]["by_invariant"]);
    // Both quickstarts: 4 workers x 7 partitions x 5 iterations pushed; fused drops the ack and the
    // pull request of each.
    const auto pushes = 4 * 7 * 5;
    EXPECT_EQ(rb["messages"].get<int>(), ra["messages"].get<int>() - 2 * pushes);
    EXPECT_LT(rb["mean_iteration_s"].get<double>(), ra["mean_iteration_s"].get<double>());
  }
}

// workload.layerwise + ps.priority_scheduling (ByteScheduler's overlap): the next forward pass starts
// once the first tensors are back, and tensor 0, pushed last by the backward pass, overtakes the
// later tensors still queued. Each one must shorten the iteration; neither may change the model.
TEST(Sim, LayerwiseOverlapAndTensorPrioritiesShortenTheIteration) {
  const auto mean_of = [](const std::string& sets) {
    const auto dir = fresh_dir("layerwise");
    const auto run =
        run_pstwin("sim scenarios/priority_layerwise.toml -q " + sets + " --out " + dir.string());
    EXPECT_EQ(run.exit_code, 0) << run.output;
    const auto r = read_json(dir / "results.json");
    EXPECT_EQ(r["invariants"]["violation_count"], 0);
    return r["mean_iteration_s"].get<double>();
  };
  const double both = mean_of("");
  const double fifo = mean_of("--set ps.priority_scheduling=false");
  const double neither = mean_of("--set workload.layerwise=false --set ps.priority_scheduling=false");
  // Compute then push everything: compute (150 ms) plus the whole exchange, whatever the order.
  EXPECT_DOUBLE_EQ(mean_of("--set workload.layerwise=false"), neither);
  EXPECT_GT(neither, 0.15);
  EXPECT_LT(fifo, 0.9 * neither);
  EXPECT_LT(both, 0.95 * fifo);

  for (const char* file : {"scenarios/quickstart.toml", "scenarios/mlp_quick.toml"}) {
    SCOPED_TRACE(file);
    const auto plain = fresh_dir("lw-plain"), layered = fresh_dir("lw-layered");
    const std::string common = std::string("sim ") + file + " -q --set workload.iterations=20";
    const auto a = run_pstwin(common + " --out " + plain.string());
    const auto b = run_pstwin(common + " --set workload.layerwise=true --out " + layered.string());
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(b.exit_code, 0) << b.output;
    const auto ra = read_json(plain / "results.json"), rb = read_json(layered / "results.json");
    EXPECT_EQ(ra["model_digest"], rb["model_digest"]);
    EXPECT_EQ(rb["invariants"]["violation_count"], 0);
    EXPECT_LT(rb["mean_iteration_s"].get<double>(), ra["mean_iteration_s"].get<double>());
  }
}

TEST(Sim, CrossedLineFoundWithin20SeedsAndReplayedExactly) {
  const auto dir = fresh_dir("crossed-found");
  const auto explore = run_pstwin(
      "explore scenarios/crossed_line.toml --seeds 20 -q --set staging.naming=legacy-key-only --out " +
      dir.string());
  ASSERT_EQ(explore.exit_code, 1) << explore.output;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(
      explore.output, match,
      std::regex("seed (\\d+): .*first \\[(\\w+)\\] ([^\\n]*)\\n  replay: (pstwin sim [^\\n]*)")))
      << explore.output;
  const std::string seed = match[1], invariant = match[2], detail = match[3], replay = match[4];
  EXPECT_NE(replay.find("--seed " + seed), std::string::npos);
  EXPECT_NE(replay.find("--set staging.naming=legacy-key-only"), std::string::npos);
  // The replay command, run as printed, reproduces the same first violation.
  const auto out = fresh_dir("crossed-replay");
  const auto rerun = run_shell(std::string(PSTWIN_BINARY) + replay.substr(std::string("pstwin").size()) +
                               " -q --out " + out.string());
  EXPECT_EQ(rerun.exit_code, 1) << rerun.output;
  const auto r = read_json(out / "results.json");
  ASSERT_FALSE(r["invariants"]["violations"].empty());
  EXPECT_EQ(r["invariants"]["violations"][0]["invariant"], invariant);
  EXPECT_EQ(r["invariants"]["violations"][0]["detail"], detail);
  EXPECT_EQ(r["invariants"]["violations"][0]["replay"], replay);
  EXPECT_NE(rerun.output.find("seed " + seed + "; replay: " + replay), std::string::npos) << rerun.output;
}

TEST(Sim, CrossedLineAbsentIn2000SeedsWithPerRankNaming) {
  const auto explore = run_pstwin("explore scenarios/crossed_line.toml --seeds 2000 -j 2");
  EXPECT_EQ(explore.exit_code, 0) << explore.output.substr(0, 4000);
  EXPECT_NE(explore.output.find("explored 2000 seeds (0..1999) of crossed_line: 0 with safety violations, 0 "
                                "missing only a performance bound, 2000 clean"),
            std::string::npos)
      << explore.output.substr(0, 4000);
}

TEST(Sim, SaturationScenarioIsWithinFivePercentOfItsAnalyticBound) {
  const auto dir = fresh_dir("saturation");
  const auto run = run_pstwin("sim scenarios/saturation_8w2s.toml -q --out " + dir.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto r = read_json(dir / "results.json");
  ASSERT_TRUE(r["bound"].is_object());
  const double bound = r["bound"]["time_s"], mean = r["mean_iteration_s"];
  EXPECT_GE(mean, bound) << "a lower bound was beaten: the bound or the model is wrong";
  EXPECT_LE(mean, 1.05 * bound);
  // The bound is dominated by 8 workers x 50 MB through each server's 10 Gb/s NIC, x1/0.97, x1.05.
  EXPECT_GT(bound, 8 * 50e6 / 1.25e9);
  EXPECT_LT(bound, 8 * 52e6 * 1.05 / (0.97 * 1.25e9) + 0.01);
  for (const auto& l : r["links"])
    if (l["name"] == "h1.down" || l["name"] == "h2.down") {
      EXPECT_GT(l["utilization"].get<double>(), 0.85) << l;
    }
}

// cluster.switch_bandwidth: one link every message between hosts crosses. At 500 MB/s it, not the
// servers' 10 Gb/s NICs, bounds the saturation scenario, and the bound says so.
TEST(Sim, SwitchCapacityIsSharedByAllTrafficAndBoundsTheIteration) {
  const auto dir = fresh_dir("switch");
  const auto run = run_pstwin(
      "sim scenarios/saturation_8w2s.toml -q --set cluster.switch_bandwidth=500MBps --out " + dir.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto r = read_json(dir / "results.json");
  std::uint64_t up = 0, switched = 0;
  for (const auto& l : r["links"]) {
    const std::string name = l["name"];
    if (name == "switch") switched = l["bytes"].get<std::uint64_t>();
    if (name.ends_with(".up")) up += l["bytes"].get<std::uint64_t>();
  }
  EXPECT_GT(up, 0u);
  EXPECT_EQ(switched, up);
  // 8 workers x 100 MB pushed and pulled, plus 5 % cross traffic, at 0.97 x 500 MB/s: 3.46 s.
  const double mean = r["mean_iteration_s"].get<double>();
  EXPECT_GT(mean, 1.6e9 * 1.05 / (0.97 * 5e8));
  EXPECT_LT(mean, 1.05 * r["bound"]["time_s"].get<double>());
  EXPECT_NE(r["bound"]["formula"].get<std::string>().find("S = 5e+08"), std::string::npos);
  EXPECT_EQ(r["invariants"]["violation_count"], 0);
}

TEST(Sim, UnreachableSchedulerFailsWithinTheConnectTimeout) {
  const auto dir = fresh_dir("unreachable");
  const auto run = run_pstwin(
      "sim scenarios/quickstart.toml -q --set faults.scheduler_start_delay=60s --set ps.connect_timeout=3s "
      "--out " +
      dir.string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("cannot reach the scheduler at scheduler@h0"), std::string::npos) << run.output;
  const auto r = read_json(dir / "results.json");
  EXPECT_FALSE(r["completed"].get<bool>());
  EXPECT_NEAR(r["run_time_s"].get<double>(), 3.0, 1e-6);
  EXPECT_NE(r["failure"].get<std::string>().find("ps.connect_timeout"), std::string::npos);
}

TEST(Sim, StalledRunFailsAndSaysWhatEachNodeWaitsFor) {
  // Nodes wait longer for the scheduler than it takes to start: nothing moves, the watchdog ends it.
  const auto dir = fresh_dir("stall");
  const auto run = run_pstwin(
      "sim scenarios/quickstart.toml -q --set faults.scheduler_start_delay=2000s "
      "--set ps.connect_timeout=1000s --out " +
      dir.string());
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("no protocol progress for 30 simulated seconds"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("scheduler: not started yet"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("worker 3: registering with the scheduler at scheduler@h0"), std::string::npos);
  const auto r = read_json(dir / "results.json");
  EXPECT_FALSE(r["completed"].get<bool>());
  EXPECT_GE(r["run_time_s"].get<double>(), 30.0);
  EXPECT_LE(r["run_time_s"].get<double>(), 40.0);
}

TEST(Sim, TwoTierTopologyCarriesCrossRackTraffic) {
  const auto dir = fresh_dir("two-tier");
  const auto run = run_pstwin(
      "sim scenarios/quickstart.toml -q --set cluster.topology=two-tier --set cluster.racks=2 --out " +
      dir.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto r = read_json(dir / "results.json");
  std::uint64_t rack_bytes = 0;
  for (const auto& l : r["links"])
    if (l["name"].get<std::string>().rfind("rack", 0) == 0) rack_bytes += l["bytes"].get<std::uint64_t>();
  EXPECT_GT(rack_bytes, 0u);
}

TEST(Sim, BadScenarioInputExitsTwoNamingTheField) {
  const auto run = run_pstwin("sim scenarios/quickstart.toml -q --set ps.mode=syncc");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("ps.mode"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("\"sync\""), std::string::npos) << run.output;
  const auto missing = run_pstwin("sim scenarios/no_such_file.toml");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("no_such_file.toml"), std::string::npos) << missing.output;
}

TEST(Sim, CheckPrintsTheResolvedScenarioWithOverrides) {
  const auto run = run_pstwin("check scenarios/quickstart.toml --set roles.workers=3");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const Scenario s = parse_scenario(run.output, "check-output");
  EXPECT_EQ(s.roles.workers, 3);
  EXPECT_EQ(s.roles.servers, 2);
  EXPECT_EQ(s.ps.partition_bytes, 1000000u);
}

// [cpu]: one server, one worker, one 1 MB partition per iteration after 1 ms of compute, so every
// message of an iteration lies on its critical path, one after another.
constexpr const char* kCpuJob = R"(name = "cpu_cost"
[roles]
servers = 1
workers = 1
[ps]
partition_bytes = "1MB"
[workload]
tensor_bytes = ["1MB"]
compute = "1ms"
iterations = 4
)";

struct CpuJobRun {
  nlohmann::json results;
  std::string results_text;  // without wall_s and the replay command (it names the run's directory)
  std::string trace_text;
  nlohmann::json trace;
};

CpuJobRun run_cpu_job(const std::string& name, const std::string& sets, const char* job = kCpuJob) {
  const auto dir = fresh_dir(name);
  { std::ofstream(dir / "job.toml") << job; }
  const auto run =
      run_pstwin("sim " + (dir / "job.toml").string() + " -q " + sets + " --out " + (dir / "out").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  CpuJobRun got;
  got.results = read_json(dir / "out/results.json");
  auto without_wall = got.results;
  without_wall.erase("wall_s");
  without_wall.erase("replay");
  got.results_text = without_wall.dump();
  got.trace_text = read_text(dir / "out/trace.json");
  got.trace = nlohmann::json::parse(got.trace_text);
  return got;
}

// Per iteration index: the push and pull messages (requests and responses) sent in it and their bytes
// on the wire, from a run's trace. Registration and barriers count as iteration 0 too: left out.
std::map<int, std::pair<int, std::uint64_t>> sent_per_iteration(const nlohmann::json& trace) {
  std::map<int, std::pair<int, std::uint64_t>> sent;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "send" && e.contains("args") &&
        (e["name"].get<std::string>().starts_with("push") ||
         e["name"].get<std::string>().starts_with("pull"))) {
      auto& [count, bytes] = sent[e["args"]["iteration"].get<int>()];
      ++count;
      bytes += e["args"]["bytes"].get<std::uint64_t>();
    }
  return sent;
}

int spans_of_category(const nlohmann::json& trace, const std::string& category) {
  int count = 0;
  for (const auto& e : trace["traceEvents"]) count += e["ph"] == "X" && e["cat"] == category;
  return count;
}

TEST(Sim, CpuCostsOfZeroChangeNothing) {
  const auto bare = run_cpu_job("cpu-bare", "");
  const auto zeros = run_cpu_job("cpu-zeros",
                                 "--set cpu.send_per_message=0 --set cpu.receive_per_message=0 --set "
                                 "cpu.send_bandwidth=0 --set cpu.receive_bandwidth=0");
  EXPECT_EQ(bare.results_text, zeros.results_text);
  EXPECT_EQ(bare.trace_text, zeros.trace_text);
  EXPECT_EQ(spans_of_category(bare.trace, "cpu"), 0);
}

TEST(Sim, CpuCostsAreChargedOnEveryMessageOfTheCriticalPath) {
  const auto bare = run_cpu_job("cpu-none", "");
  const auto send = run_cpu_job("cpu-send", "--set cpu.send_per_message=100us");
  const auto receive = run_cpu_job("cpu-receive", "--set cpu.receive_per_message=100us");
  const auto bytes = run_cpu_job("cpu-bytes", "--set cpu.send_bandwidth=1GBps");
  const auto sent = sent_per_iteration(bare.trace);
  const auto& iterations = bare.results["iterations"];
  ASSERT_EQ(iterations.size(), 4u);
  for (std::size_t i = 0; i < iterations.size(); ++i) {
    const int index = iterations[i]["index"].get<int>();
    ASSERT_TRUE(sent.count(index)) << "no message of iteration " << index;
    const auto [messages, wire_bytes] = sent.at(index);
    EXPECT_EQ(messages, 2) << "push_pull and its response (fused, the default)";
    const double base = iterations[i]["time_s"].get<double>();
    const auto grew = [&](const CpuJobRun& run) {
      return run.results["iterations"][i]["time_s"].get<double>() - base;
    };
    EXPECT_NEAR(grew(send), messages * 100e-6, 1e-9) << "iteration " << index;
    EXPECT_NEAR(grew(receive), messages * 100e-6, 1e-9) << "iteration " << index;
    EXPECT_NEAR(grew(bytes), static_cast<double>(wire_bytes) / 1e9, 1e-9) << "iteration " << index;
  }
  // Each charge is a span on the node's net lane, one per message sent (or received).
  EXPECT_EQ(spans_of_category(send.trace, "cpu"), spans_of_category(send.trace, "send"));
  EXPECT_EQ(spans_of_category(receive.trace, "cpu"), spans_of_category(receive.trace, "receive"));
  // The model is unchanged: only time moved.
  EXPECT_EQ(send.results["model_digest"], bare.results["model_digest"]);
}

// Per iteration of `bare` (index order): its push and pull messages, their wire bytes, and how much
// longer each of `runs` took for it.
struct Growth {
  int index = 0;
  int messages = 0;
  std::uint64_t wire_bytes = 0;
  std::vector<double> seconds;  // per run
};

std::vector<Growth> growth(const CpuJobRun& bare, std::initializer_list<const CpuJobRun*> runs) {
  const auto sent = sent_per_iteration(bare.trace);
  const auto& iterations = bare.results["iterations"];
  std::vector<Growth> out;
  for (std::size_t i = 0; i < iterations.size(); ++i) {
    Growth g;
    g.index = iterations[i]["index"].get<int>();
    std::tie(g.messages, g.wire_bytes) = sent.at(g.index);
    for (const CpuJobRun* run : runs)
      g.seconds.push_back(run->results["iterations"][i]["time_s"].get<double>() -
                          iterations[i]["time_s"].get<double>());
    out.push_back(g);
  }
  return out;
}

// TCP streams a message: the receiver copies its bytes out while the sender copies them in, so a
// message costs the slower side's per-byte time, not the sum of both.
TEST(Sim, AMessagesBytesAreReadWhileTheyAreSent) {
  // Links far faster than the CPU costs: what an iteration gains is the costs on its critical path.
  const std::string fast = "--set cluster.host_bandwidth=1000GBps --set cluster.host_latency=1us ";
  const auto bare = run_cpu_job("overlap-none", fast);
  const auto send = run_cpu_job("overlap-send", fast + "--set cpu.send_bandwidth=1GBps");
  const auto both =
      run_cpu_job("overlap-both", fast + "--set cpu.send_bandwidth=1GBps --set cpu.receive_bandwidth=1GBps");
  const auto slow_read = run_cpu_job(
      "overlap-slow-read", fast + "--set cpu.send_bandwidth=1GBps --set cpu.receive_bandwidth=0.5GBps");
  const auto grown = growth(bare, {&send, &both, &slow_read});
  ASSERT_EQ(grown.size(), 4u);
  for (const auto& g : grown) {
    ASSERT_EQ(g.messages, 2);
    const double send_s = static_cast<double>(g.wire_bytes) / 1e9;  // both messages' send costs
    EXPECT_NEAR(g.seconds[0], send_s, 1e-9) << "iteration " << g.index;
    // Read as fast as it is written: the read ends with the send and costs nothing more.
    EXPECT_NEAR(g.seconds[1], send_s, 1e-9) << "iteration " << g.index;
    // Read at half the rate: the read's time (twice the send's), less the links' few microseconds,
    // where one after the other would take three times the send's.
    EXPECT_NEAR(g.seconds[2], 2 * send_s, 10e-6) << "iteration " << g.index;
  }
}

// cpu.wakeup: a message that finds its node idle waits for the van to wake; one that finds it busy
// reading does not.
TEST(Sim, AnIdleNodeWakesForAMessageAndABusyOneDoesNot) {
  const auto bare = run_cpu_job("wakeup-none", "");
  const auto woken = run_cpu_job("wakeup-50us", "--set cpu.wakeup=50us");
  const auto blocking = growth(bare, {&woken});
  ASSERT_EQ(blocking.size(), 4u);
  // A blocking round trip: the server waits for the push, the worker for the reply.
  for (const auto& g : blocking)
    EXPECT_NEAR(g.seconds[0], g.messages * 50e-6, 1e-9) << "iteration " << g.index;
  // Eight partitions in flight: the server reads them back to back, so only the first one of a
  // burst finds it asleep.
  const std::string burst = "--set workload.tensor_bytes=8MB --set cpu.receive_per_message=200us";
  const auto busy = run_cpu_job("wakeup-busy-none", burst);
  const auto busy_woken = run_cpu_job("wakeup-busy-50us", burst + " --set cpu.wakeup=50us");
  const auto pipelined = growth(busy, {&busy_woken});
  ASSERT_EQ(pipelined.size(), 4u);
  for (const auto& g : pipelined) {
    ASSERT_EQ(g.messages, 16) << "eight push_pulls and their responses";
    EXPECT_GE(g.seconds[0], 50e-6 - 1e-9) << "iteration " << g.index;
    EXPECT_LT(g.seconds[0], g.messages * 50e-6 / 2) << "iteration " << g.index;
  }
}

TEST(Sim, CpuCostsKeepTheSameSeedByteIdentical) {
  const std::string sets =
      "--set cpu.send_per_message=7us --set cpu.receive_per_message=3us --set cpu.send_bandwidth=3GBps "
      "--set cpu.receive_bandwidth=2GBps --set perturbation.delivery_jitter=20us";
  const auto a = run_cpu_job("cpu-det-a", sets);
  const auto b = run_cpu_job("cpu-det-b", sets);
  EXPECT_EQ(a.results_text, b.results_text);
  EXPECT_EQ(a.trace_text, b.trace_text);
  EXPECT_GT(spans_of_category(a.trace, "cpu"), 0);
}

// cpu.shared_cores: two workers on one host, the server on a host of its own, 100 us of CPU per
// message received, links so fast that no two messages slow each other down on the wire. The server answers
// both workers' push_pull (fused) once the round is complete, at the same instant, so the two answers reach
// the workers' host together. With two cores the workers read them side by side; with one core the second
// waits for the first: it starts exactly one receive cost later. (Registration and barriers wait too, so
// whole runs differ by more than that.)
constexpr const char* kSharedCoresJob = R"(name = "shared_cores"
[cluster]
hosts = 2
host_bandwidth = "1000GBps"
host_latency = "1us"
[roles]
servers = 1
workers = 2
scheduler_host = "h0"
server_hosts = ["h0"]
worker_hosts = ["h1"]
[ps]
partition_bytes = "1MB"
push_pull = "fused"
[workload]
tensor_bytes = ["1MB"]
compute = "1ms"
iterations = 4
[cpu]
receive_per_message = "100us"
)";

CpuJobRun run_shared_cores(const std::string& name, const std::string& sets) {
  return run_cpu_job(name, sets, kSharedCoresJob);
}

// How many pairs of `cpu` spans of different processes among `pids` overlap in time.
int overlapping_cpu_spans(const nlohmann::json& trace, const std::set<int>& pids) {
  std::vector<std::tuple<double, double, int>> spans;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "cpu" && pids.count(e["pid"].get<int>()))
      spans.emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>(),
                         e["pid"].get<int>());
  int overlaps = 0;
  for (std::size_t i = 0; i < spans.size(); ++i)
    for (std::size_t j = i + 1; j < spans.size(); ++j) {
      const auto& [a_start, a_end, a_pid] = spans[i];
      const auto& [b_start, b_end, b_pid] = spans[j];
      overlaps += a_pid != b_pid && a_start < b_end - 1e-3 && b_start < a_end - 1e-3;  // ts in us
    }
  return overlaps;
}

// The trace's process ids of the nodes named `prefix`N (e.g. "worker").
std::set<int> pids_named(const nlohmann::json& trace, const std::string& prefix) {
  std::set<int> pids;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name" &&
        e["args"]["name"].get<std::string>().starts_with(prefix))
      pids.insert(e["pid"].get<int>());
  return pids;
}

// Per iteration: the start times (us) of the workers' CPU charges for receiving their answer (the only
// messages with the 1 MB payload), earliest first.
std::map<int, std::vector<double>> answer_reads(const nlohmann::json& trace, const std::set<int>& workers) {
  std::map<int, std::vector<double>> reads;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "cpu" && workers.count(e["pid"].get<int>()) && e.contains("args") &&
        e["args"]["bytes"].get<std::uint64_t>() > 1000000)
      reads[e["args"]["iteration"].get<int>()].push_back(e["ts"].get<double>());
  for (auto& [iteration, starts] : reads) std::sort(starts.begin(), starts.end());
  return reads;
}

// Per iteration, the workers' two CPU charges that carry their answer (`cost_us` each): at the same
// instant with two cores, one cost apart with one.
void expect_side_by_side_on_two_cores_one_after_the_other_on_one(const CpuJobRun& one, const CpuJobRun& two,
                                                                 const std::set<int>& workers,
                                                                 double cost_us) {
  const auto side_by_side = answer_reads(two.trace, workers);
  const auto one_by_one = answer_reads(one.trace, workers);
  ASSERT_EQ(side_by_side.size(), 4u);
  ASSERT_EQ(one_by_one.size(), 4u);
  for (const auto& [iteration, starts] : side_by_side) {
    ASSERT_EQ(starts.size(), 2u) << "iteration " << iteration;
    EXPECT_NEAR(starts[1], starts[0], 1e-3) << "iteration " << iteration << ": side by side";
    const auto& waited = one_by_one.at(iteration);
    ASSERT_EQ(waited.size(), 2u) << "iteration " << iteration;
    EXPECT_NEAR(waited[1] - waited[0], cost_us, 1e-3) << "iteration " << iteration << ": one after the other";
  }
}

TEST(Sim, NodesSharingOneCoreWaitForEachOthersCpuCosts) {
  const auto one = run_shared_cores("cores-1", "--set cpu.shared_cores=1");
  const auto two = run_shared_cores("cores-2", "--set cpu.shared_cores=2");
  const auto own = run_shared_cores("cores-own", "");
  // Two cores for two workers: what a core per lane gives.
  EXPECT_EQ(two.results_text, own.results_text);
  const auto workers = pids_named(two.trace, "worker");
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_GT(overlapping_cpu_spans(two.trace, workers), 0) << "the two answers are read side by side";
  EXPECT_EQ(overlapping_cpu_spans(one.trace, workers), 0) << "one core runs one charge at a time";
  // Reading both answers of an iteration takes one receive cost (100 us) on two cores, two on one.
  expect_side_by_side_on_two_cores_one_after_the_other_on_one(one, two, workers, 100);
  EXPECT_EQ(one.results["model_digest"], two.results["model_digest"]);
}

// cpu.wakeup is CPU time: the two answers that find both workers asleep wake them side by side on two
// cores and one after the other on one.
TEST(Sim, AWakeUpTakesACoreOfItsNode) {
  const std::string wake_only = "--set cpu.receive_per_message=0 --set cpu.wakeup=100us ";
  const auto one = run_shared_cores("wake-cores-1", wake_only + "--set cpu.shared_cores=1");
  const auto two = run_shared_cores("wake-cores-2", wake_only + "--set cpu.shared_cores=2");
  const auto workers = pids_named(two.trace, "worker");
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(overlapping_cpu_spans(one.trace, workers), 0) << "one core wakes one worker at a time";
  // The only CPU spans that carry an answer's 1 MB are the wake-ups (no receive cost is set).
  expect_side_by_side_on_two_cores_one_after_the_other_on_one(one, two, workers, 100);
}

TEST(Sim, MachineScopeSharesTheCoresOfEveryHost) {
  // The server's host has cores of its own with "host" scope; with "machine" the workers' and the
  // server's charges meet on the same single core, which can only be slower.
  const auto host = run_shared_cores("cores-host", "--set cpu.shared_cores=1");
  const auto machine =
      run_shared_cores("cores-machine", "--set cpu.shared_cores=1 --set cpu.core_scope=machine");
  std::set<int> everyone = pids_named(machine.trace, "worker");
  for (const int pid : pids_named(machine.trace, "server")) everyone.insert(pid);
  EXPECT_EQ(overlapping_cpu_spans(machine.trace, everyone), 0);
  EXPECT_GE(machine.results["run_time_s"].get<double>(), host.results["run_time_s"].get<double>());
}

TEST(Sim, SharedCoresKeepTheSameSeedByteIdentical) {
  const std::string sets =
      "--set cpu.shared_cores=1 --set cpu.receive_bandwidth=2GBps --set perturbation.delivery_jitter=20us";
  const auto a = run_shared_cores("cores-det-a", sets);
  const auto b = run_shared_cores("cores-det-b", sets);
  EXPECT_EQ(a.results_text, b.results_text);
}

// bench/partition_sweep.py on loopback, two sizes: the sim shares this machine's cores among the nodes
// (cpu.core_scope = "machine") and the fragment's other fields reach every simulated run.
TEST(PartitionSweep, RunsSimAndLoopbackAndSharesTheMachinesCores) {
  const auto dir = fresh_dir("partition-sweep");
  {
    std::ofstream(dir / "cpu.toml") << "[cpu]\nsend_per_message = \"2us\"\nreceive_per_message = \"2us\"\n"
                                       "send_bandwidth = \"7GBps\"\nreceive_bandwidth = \"7GBps\"\n";
  }
  const auto run =
      run_shell("python3 bench/partition_sweep.py --pstwin " PSTWIN_BINARY " --van epoll --cpu " +
                (dir / "cpu.toml").string() + " --sizes 256KB,1MB --iterations 2 --rounds 2 --out " +
                (dir / "out").string());
  EXPECT_TRUE(run.exit_code == 0 || run.exit_code == 3) << run.output;
  EXPECT_NE(run.output.find("van epoll, loopback"), std::string::npos) << run.output;
  // The real side runs each size once per round; the median of the rounds is compared.
  EXPECT_NE(run.output.find("Real runs per size (2, interleaved)"), std::string::npos) << run.output;
  for (const char* real : {"real-256KB-0", "real-256KB-1", "real-1MB-0", "real-1MB-1"})
    EXPECT_TRUE(read_json(dir / "out" / real / "results.json")["completed"].get<bool>()) << real;
  EXPECT_NE(run.output.find("a core per node's net lane"), std::string::npos) << run.output;
  const auto shared = read_json(dir / "out/sim-1MB/results.json");
  const auto own = read_json(dir / "out/sim-own-core-1MB/results.json");
  EXPECT_TRUE(shared["completed"].get<bool>());
  EXPECT_TRUE(own["completed"].get<bool>());
  // The fragment has no shared_cores: the sweep gives the sim this machine's CPU count.
  const std::string replay = shared["replay"];
  EXPECT_NE(replay.find("--set cpu.core_scope=machine"), std::string::npos) << replay;
  EXPECT_NE(replay.find("--set cpu.shared_cores=" + std::to_string(std::thread::hardware_concurrency())),
            std::string::npos)
      << replay;
  EXPECT_NE(std::string(own["replay"]).find("--set cpu.shared_cores=0"), std::string::npos) << own["replay"];
}

TEST(PartitionSweep, BandwidthWithoutNetnsIsRefused) {
  const auto run = run_shell("python3 bench/partition_sweep.py --pstwin " PSTWIN_BINARY " --bandwidth 1Gbps");
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("--bandwidth"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("--netns"), std::string::npos) << run.output;
}

// A real calibration, kept short: loopback jobs of two sizes on the epoll van, fitted and written.
TEST(Calibrate, WritesAFragmentThatLoadsWithPositiveCosts) {
  const auto dir = fresh_dir("calibrate");
  const auto fragment = dir / "cpu.toml";
  const auto run = run_pstwin("calibrate --van epoll --quick --sizes 4KB,1MB --out " + fragment.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("rms error"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("1MB pipelined"), std::string::npos) << run.output;
  const std::string text = read_text(fragment);
  EXPECT_NE(text.find("--van epoll"), std::string::npos) << text;
  EXPECT_NE(text.find("CPUs, load average"), std::string::npos) << text;
  EXPECT_NE(text.find("1 server, 2 workers on loopback, 3 rounds, a process per node"), std::string::npos)
      << text;
  EXPECT_NE(text.find("wakeup = "), std::string::npos) << text;
  const Scenario s = parse_scenario(text, fragment.string());
  EXPECT_GT(s.cpu.send_per_message_s + s.cpu.wakeup_s, 0) << text;
  EXPECT_GT(s.cpu.send_bandwidth_Bps, 0) << text;
  EXPECT_EQ(s.cpu.receive_per_message_s, s.cpu.send_per_message_s);
  EXPECT_EQ(s.cpu.receive_bandwidth_Bps, s.cpu.send_bandwidth_Bps);
  // Past the cache a byte costs at least what one within it does.
  if (s.cpu.cache_bytes > 0) {
    EXPECT_GT(s.cpu.send_bandwidth_beyond_cache_Bps, 0) << text;
    EXPECT_LE(s.cpu.send_bandwidth_beyond_cache_Bps, s.cpu.send_bandwidth_Bps) << text;
  }
  EXPECT_EQ(s.cpu.shared_cores, static_cast<int>(std::thread::hardware_concurrency())) << text;
  EXPECT_EQ(s.cpu.core_scope, "host") << text;
  // What a scenario with the fragment appended simulates.
  const auto with_cpu = dir / "with_cpu.toml";
  std::ofstream(with_cpu) << read_text(PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml") << "\n" << text;
  const auto sim = run_pstwin("sim " + with_cpu.string() + " -q --out " + (dir / "sim").string());
  EXPECT_EQ(sim.exit_code, 0) << sim.output;
}

// The ucx van's profile: the same fit over UCX (shared memory between the job's nodes here), so a
// scenario can ask what a job does with that van's costs instead of a TCP van's. Its nodes are threads of
// one process here, each job run once.
TEST(Calibrate, TheUcxVanGetsItsOwnFragment) {
  if (const auto missing = realnet::van_unavailable(realnet::Van::kUcx); !missing.empty())
    GTEST_SKIP() << missing;
  const auto dir = fresh_dir("calibrate-ucx");
  const auto fragment = dir / "cpu.toml";
  const auto run = run_pstwin(
      "calibrate --van ucx --quick --nodes in-process --rounds 1 --sizes 4KB,1MB --out " + fragment.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("1MB pipelined"), std::string::npos) << run.output;
  const std::string text = read_text(fragment);
  EXPECT_NE(text.find("--van ucx"), std::string::npos) << text;
  EXPECT_NE(text.find("1 round, in-process nodes"), std::string::npos) << text;
  const Scenario s = parse_scenario(text, fragment.string());
  EXPECT_GT(s.cpu.send_per_message_s, 0) << text;
  EXPECT_GT(s.cpu.send_bandwidth_Bps, 0) << text;
}

// A node process of `pstwin calibrate` runs a job whose scenario lies under `scratch_root`.
bool a_calibration_job_runs(const std::filesystem::path& scratch_root) {
  for (const auto& process : std::filesystem::directory_iterator("/proc")) {
    const std::string name = process.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(process.path() / "cmdline");  // a process may be gone by now: then it reads nothing
    const std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmdline.find(scratch_root.string()) != std::string::npos && cmdline.find("node") != std::string::npos)
      return true;
  }
  return false;
}

// Ctrl-C while a real job runs: its nodes are killed, and the folder of the jobs' scenarios goes too.
TEST(Calibrate, AnInterruptedCalibrationLeavesNoScratchFolder) {
  using namespace std::chrono_literals;
  const auto dir = fresh_dir("calibrate-interrupt");
  const auto tmp = dir / "tmp";
  std::filesystem::create_directories(tmp);
  // 16 MB and 32 MB jobs last long enough to be caught running.
  std::vector<std::string> env{"TMPDIR=" + tmp.string()};  // the scratch folder goes there
  for (char** e = environ; *e != nullptr; ++e)
    if (!std::string_view(*e).starts_with("TMPDIR=")) env.emplace_back(*e);
  testing::ChildProcess calibrate(
      {"calibrate", "--van", "epoll", "--sizes", "16MB,32MB", "--out", (dir / "cpu.toml").string()},
      dir / "output.txt", env);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!a_calibration_job_runs(tmp) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(a_calibration_job_runs(tmp)) << calibrate.output();
  ASSERT_EQ(::kill(calibrate.pid(), SIGINT), 0);
  const auto status = calibrate.wait_until(std::chrono::steady_clock::now() + 30s);
  ASSERT_TRUE(status.has_value()) << "still running after SIGINT: " << calibrate.output();
  EXPECT_EQ(*status, 128 + SIGINT) << calibrate.output();
  EXPECT_TRUE(std::filesystem::is_empty(tmp))
      << "left in " << tmp << ": " << std::filesystem::directory_iterator(tmp)->path();
  EXPECT_FALSE(std::filesystem::exists(dir / "cpu.toml"));
}

TEST(Calibrate, BadSizesAreRefusedNamingTheOption) {
  const auto run = run_pstwin("calibrate --sizes 4KB");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.output.find("--sizes"), std::string::npos) << run.output;
  const auto bad = run_pstwin("calibrate --sizes 4KB,lots");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("'lots'"), std::string::npos) << bad.output;
  const auto nodes = run_pstwin("calibrate --nodes fibers");
  EXPECT_EQ(nodes.exit_code, 2);
  EXPECT_NE(nodes.output.find("--nodes"), std::string::npos) << nodes.output;
  const auto rounds = run_pstwin("calibrate --rounds 0");
  EXPECT_EQ(rounds.exit_code, 2);
  EXPECT_NE(rounds.output.find("--rounds"), std::string::npos) << rounds.output;
}

TEST(Sim, HelpIsAvailableEverywhere) {
  for (const char* sub : {"", "sim ", "check ", "explore "}) {
    const auto run = run_pstwin(std::string(sub) + "--help");
    EXPECT_EQ(run.exit_code, 0) << sub;
    EXPECT_NE(run.output.find("--"), std::string::npos) << sub;
  }
}

}  // namespace
}  // namespace pstwin
