// ps.local_reduce = "shm" (BytePS's hierarchical mode): the shipped 2-host x 4-worker scenario through
// the real binary in both backends (same model as without local reduce, a quarter of the cross-host
// push and pull bytes, the simulator within 5 % of its bound, byte-identical reruns), the protocol on
// the in-process harness (exact sums, forged local_reduce messages ignored), and the refusals.
// "nccl" (the host's GPUs as one group) the same way where no GPU is needed: the simulator with its
// emulated groups, the harness with emulated devices (a failing device call too), the bound and the
// refusals; its real runs on GPUs are the Cuda.Nccl* tests (test_device.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "harness.hpp"
#include "ps/device.hpp"
#include "ps/device_reduce.hpp"
#include "ps/host_groups.hpp"
#include "ps/ids.hpp"
#include "ps/invariants.hpp"
#include "ps/scheduler.hpp"
#include "ps/server.hpp"
#include "ps/worker.hpp"
#include "report/run_recorder.hpp"
#include "scenario/scenario.hpp"
#include "sim_support.hpp"
#include "zeno/roles.hpp"

namespace pstwin {
namespace {

constexpr const char* kScenario = "scenarios/local_reduce_2x4.toml";  // for pstwin, run from the sources
constexpr const char* kScenarioFile = PSTWIN_SOURCE_DIR "/scenarios/local_reduce_2x4.toml";

std::uint64_t push_pull_bytes(const nlohmann::json& results) {
  return results["cross_host"]["push_pull_bytes"].get<std::uint64_t>();
}

void expect_clean(const nlohmann::json& results, const std::string& output) {
  EXPECT_TRUE(results["completed"].get<bool>()) << output;
  EXPECT_TRUE(results["invariants"]["violations"].empty()) << results["invariants"]["violations"].dump();
}

TEST(LocalReduce, GroupsFollowThePlacementAndRootsAreTheLowestRanks) {
  const Scenario sc = load_scenario(kScenarioFile);
  const HostGroups groups(sc);
  ASSERT_TRUE(groups.active());
  EXPECT_EQ(std::vector<int>(groups.roots().begin(), groups.roots().end()), (std::vector<int>{0, 4}));
  EXPECT_EQ(std::vector<int>(groups.members(4).begin(), groups.members(4).end()),
            (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(groups.root_of(6), 4);
  EXPECT_FALSE(groups.is_root(3));
  EXPECT_EQ(groups.root_of(8), -1);  // no such worker
  EXPECT_EQ(node_host(sc, worker_id(5)), "h4");
  EXPECT_EQ(node_host(sc, server_id(1)), "h2");
  EXPECT_EQ(node_host(sc, kRegistrantIdBase + 3), "");
  const Scenario plain = load_scenario(kScenarioFile, {{"ps.local_reduce", "none"}});
  const HostGroups none(plain);
  EXPECT_EQ(none.pushers(), 8);
  EXPECT_TRUE(none.is_root(6));
  // Every node must place the workers alike to agree on the groups: the placement joins the job's fields.
  const auto defines = [](const Scenario& s, std::string_view path) {
    return std::ranges::any_of(job_fields(s), [&](const auto& field) { return field.first == path; });
  };
  EXPECT_TRUE(defines(sc, "roles.worker_hosts"));
  EXPECT_TRUE(defines(sc, "cluster.hosts"));
  EXPECT_FALSE(defines(plain, "roles.worker_hosts"));
}

// The bound counts each host once on the network and adds the intra-host copies: more workers per
// host cost only copies, a slower intra-host link a longer bound.
TEST(LocalReduce, BoundCountsHostsAndIntraHostCopies) {
  const Scenario sc = load_scenario(kScenarioFile);
  const SyntheticWorkload workload(sc);
  const auto bound = analytic_bound(sc, workload, 1, 1, 0);
  ASSERT_TRUE(bound);
  EXPECT_NE(bound->formula.find("n=2 pushing hosts"), std::string::npos) << bound->formula;
  // The same as two workers alone on those hosts, plus one partition's reduce and broadcast copies:
  // (k+1) * q / I = 5 * 2 MB / 100 GB/s.
  const Scenario plain = load_scenario(
      kScenarioFile,
      {{"ps.local_reduce", "none"}, {"roles.workers", "2"}, {"roles.worker_hosts", "[\"h3\", \"h4\"]"}});
  const auto plain_bound = analytic_bound(plain, SyntheticWorkload(plain), 1, 1, 0);
  ASSERT_TRUE(plain_bound);
  EXPECT_NEAR(bound->time_s - plain_bound->time_s, 5 * 2e6 / 100e9, 1e-9);
  const Scenario slow = load_scenario(kScenarioFile, {{"cluster.intra_host_bandwidth", "1GBps"}});
  const auto slower = analytic_bound(slow, SyntheticWorkload(slow), 1, 1, 0);
  ASSERT_TRUE(slower);
  // The root's reduce lane copies 4 x 32 MB at 1 GB/s: that, not the network, bounds the iteration.
  EXPECT_GT(slower->time_s, 0.01 + 4 * 32e6 / 1e9);
  // Without local reduce four workers share each host's NIC: no closed form.
  const Scenario none = load_scenario(kScenarioFile, {{"ps.local_reduce", "none"}});
  EXPECT_FALSE(analytic_bound(none, SyntheticWorkload(none), 1, 1, 0));
}

TEST(LocalReduce, SimKeepsTheModelCutsCrossHostBytesFourfoldAndMeetsItsBound) {
  const auto shm = testing::fresh_dir("lr-sim-shm"), again = testing::fresh_dir("lr-sim-again"),
             none = testing::fresh_dir("lr-sim-none");
  const auto a = testing::run_pstwin(std::string("sim ") + kScenario + " -q --out " + shm.string());
  const auto b = testing::run_pstwin(std::string("sim ") + kScenario + " -q --out " + again.string());
  const auto c = testing::run_pstwin(std::string("sim ") + kScenario +
                                     " -q --set ps.local_reduce=none --out " + none.string());
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto ra = testing::read_json(shm / "results.json"), rb = testing::read_json(again / "results.json");
  const auto rc = testing::read_json(none / "results.json");
  expect_clean(ra, a.output);
  expect_clean(rc, c.output);
  EXPECT_EQ(ra["model_digest"], rc["model_digest"]);
  EXPECT_FALSE(ra["model_digest"].get<std::string>().empty());
  // Two hosts push and pull instead of eight workers: exactly a quarter of the model's traffic.
  EXPECT_EQ(4 * push_pull_bytes(ra), push_pull_bytes(rc));
  EXPECT_GT(push_pull_bytes(ra), 0u);
  ASSERT_TRUE(ra["bound"].is_object());
  const double bound = ra["bound"]["time_s"], achieved = ra["mean_iteration_s"];
  EXPECT_GE(achieved, bound);
  EXPECT_LE(achieved, 1.05 * bound) << ra["bound"]["formula"];
  EXPECT_LT(achieved, rc["mean_iteration_s"].get<double>());
  // The same run twice: byte-identical results and trace.
  ra.erase("wall_s");
  rb.erase("wall_s");
  EXPECT_TRUE(ra == rb) << "two runs of the same scenario wrote different results.json";
  EXPECT_TRUE(testing::read_text(shm / "trace.json") == testing::read_text(again / "trace.json"))
      << "and different traces";
  EXPECT_NE(testing::read_text(shm / "trace.json").find("host reduce"), std::string::npos);
}

TEST(LocalReduce, RealRunGivesTheSimulatorsModelWithAQuarterOfTheCrossHostBytes) {
  const auto sim = testing::fresh_dir("lr-real-sim"), shm = testing::fresh_dir("lr-real-shm"),
             none = testing::fresh_dir("lr-real-none");
  const std::string short_run = " -q --set workload.iterations=2";
  const auto s = testing::run_pstwin(std::string("sim ") + kScenario + short_run + " --out " + sim.string());
  const auto a = testing::run_pstwin(std::string("run ") + kScenario + short_run + " --out " + shm.string());
  const auto c = testing::run_pstwin(std::string("run ") + kScenario + short_run +
                                     " --set ps.local_reduce=none --out " + none.string());
  ASSERT_EQ(s.exit_code, 0) << s.output;
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const auto rs = testing::read_json(sim / "results.json"), ra = testing::read_json(shm / "results.json"),
             rc = testing::read_json(none / "results.json");
  expect_clean(ra, a.output);
  expect_clean(rc, c.output);
  EXPECT_EQ(ra["backend"], "real");
  EXPECT_EQ(ra["model_digest"], rs["model_digest"]);
  EXPECT_EQ(rc["model_digest"], rs["model_digest"]);
  EXPECT_EQ(4 * push_pull_bytes(ra), push_pull_bytes(rc));
  // Both backends count the same messages between the same scenario hosts.
  EXPECT_EQ(push_pull_bytes(ra), push_pull_bytes(rs));
}

// The scenario's error with `overrides` applied; "" when it loads.
std::string error_of(const std::vector<std::pair<std::string, std::string>>& overrides) {
  try {
    load_scenario(kScenarioFile, overrides);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

TEST(LocalReduce, RefusalsNameTheFieldAndExitTwo) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> overrides;
    std::string says;
  };
  const std::vector<Case> cases{
      {{{"ps.local_reduce", "nccl"}},
       built_with_nccl() ? "workload.device = \"cpu\" keeps them in host memory; set workload.device = "
                           "\"cuda\", or use ps.local_reduce = \"shm\""
                         : "built without NCCL"},
      {{{"ps.mode", "async"}}, "async"},
      {{{"workload.kind", "mlp"}}, "workload.kind = \"synthetic\""},
      {{{"ps.balancing", "lb"}}, "ps.balancing"},
      {{{"workload.layerwise", "true"}}, "workload.layerwise"},
      {{{"ps.backup_workers", "1"}}, "ps.backup_workers"},
      {{{"ps.on_worker_loss", "continue"}}, "ps.on_worker_loss"},
  };
  for (const auto& [overrides, says] : cases) {
    const std::string error = error_of(overrides);
    SCOPED_TRACE(overrides.front().first);
    EXPECT_NE(error.find("ps.local_reduce = "), std::string::npos) << error;
    EXPECT_NE(error.find(says), std::string::npos) << error;
  }
  const auto dir = testing::fresh_dir("lr-refused");
  for (const char* command : {"sim", "run"}) {
    const auto refused = testing::run_pstwin(std::string(command) + " " + kScenario +
                                             " -q --set ps.local_reduce=nccl --out " + dir.string());
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.output.find("ps.local_reduce"), std::string::npos) << refused.output;
  }
}

// A small local-reduce job on the harness: 3 workers on h2 (root 0), 1 alone on h3, one server.
struct HostJob {
  explicit HostJob(const Scenario& s, DeviceFactory device = {})
      : scenario(s),
        roles(scenario, std::move(device)),
        workload(roles.workload()),
        checker(scenario, workload),
        fan({&checker}) {
    auto& sched = harness.add("scheduler@h0");
    scheduler = roles.make(Role::kScheduler, 0, sched, fan, "");
    sched.node = scheduler.get();
    runtimes.push_back(&sched);
    auto& srv = harness.add("server0@h1", "h1");
    nodes.push_back(roles.make(Role::kServer, 0, srv, fan, "scheduler@h0"));
    srv.node = nodes.back().get();
    runtimes.push_back(&srv);
    for (int r = 0; r < scenario.roles.workers; ++r) {
      const std::string host = scenario.worker_host_name(r);
      auto& rt = harness.add("worker" + std::to_string(r) + "@" + host, host);
      nodes.push_back(roles.make(Role::kWorker, r, rt, fan, "scheduler@h0"));
      rt.node = nodes.back().get();
      runtimes.push_back(&rt);
    }
  }
  bool all_stopped() const {
    return std::ranges::all_of(runtimes, [](const testing::FakeRuntime* rt) { return rt->stopped; });
  }
  void start() {
    for (auto* rt : runtimes) rt->node->start();
  }
  // Runs the whole job: every node stops without a failure and the invariants hold.
  void run_clean() {
    start();
    harness.run([&] { return all_stopped(); });
    ASSERT_TRUE(all_stopped());
    for (const auto* rt : runtimes) EXPECT_TRUE(rt->failure.empty()) << rt->failure;
    checker.finish(true);
    EXPECT_EQ(checker.violation_count(), 0u) << checker.violations().front().detail;
  }
  Scenario scenario;
  zeno::JobRoles roles;
  const SyntheticWorkload& workload;
  InvariantChecker checker;
  ObserverFanout fan;
  testing::Harness harness;
  std::unique_ptr<Node> scheduler;
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<testing::FakeRuntime*> runtimes;
};

Scenario host_job_scenario() {
  return parse_scenario(
      "name = \"hostjob\"\n[cluster]\nhosts = 4\n[roles]\nservers = 1\nworkers = 4\nserver_hosts = "
      "[\"h1\"]\nworker_hosts = [\"h2\", \"h2\", \"h2\", \"h3\"]\n[ps]\nlocal_reduce = \"shm\"\n"
      "partition_bytes = 4096\n[workload]\ntensor_bytes = [8192, 4096]\niterations = 3\n",
      "local-reduce-test");
}

// A push, separate or fused (the default).
bool is_push(const Message& m) {
  return m.header.command == Command::kPush || m.header.command == Command::kPushPull;
}

Message local_reduce(NodeId from, NodeId to, std::uint64_t key, std::uint32_t iteration, bool response) {
  Message m;
  m.header.sender = from;
  m.header.recipient = to;
  m.header.command = Command::kLocalReduce;
  m.header.is_response = response;
  m.header.key = key;
  m.header.iteration = iteration;
  return m;
}

TEST(LocalReduce, HarnessJobSumsExactlyAndOnlyRootsReachTheServer) {
  HostJob job(host_job_scenario());
  ASSERT_NO_FATAL_FAILURE(job.run_clean());
  // Workers 1 and 2 talk only to their root (and the scheduler); 0 and 3 push for their hosts.
  for (int w = 0; w < 4; ++w) {
    const auto& sent = job.runtimes[static_cast<std::size_t>(2 + w)]->sent;
    const bool pushed = std::ranges::any_of(sent, is_push);
    EXPECT_EQ(pushed, w == 0 || w == 3) << "worker " << w;
  }
}

TEST(LocalReduce, ForgedLocalReduceMessagesAreIgnoredNotFatal) {
  HostJob job(host_job_scenario());
  const std::uint64_t key = job.workload.partitions().front().key;
  // Once the root pushes, forged requests and answers from everyone who should not send them.
  job.start();
  job.harness.run([&] { return std::ranges::any_of(job.runtimes[2]->sent, is_push); });
  job.harness.deliver("worker0@h2", local_reduce(worker_id(3), worker_id(0), key, 0, false));  // other host
  job.harness.deliver("worker0@h2", local_reduce(worker_id(1), worker_id(0), 999999, 0, false));  // no key
  job.harness.deliver("worker0@h2", local_reduce(worker_id(1), worker_id(0), key, 7, false));     // iteration
  job.harness.deliver("worker1@h2", local_reduce(worker_id(2), worker_id(1), key, 0, false));     // not root
  job.harness.deliver("worker1@h2", local_reduce(worker_id(2), worker_id(1), key, 0, true));      // not root
  job.harness.deliver("worker1@h2", local_reduce(worker_id(0), worker_id(1), key, 2, true));   // not staged
  job.harness.deliver("server0@h1", local_reduce(worker_id(1), server_id(0), key, 0, false));  // server
  job.harness.run([&] { return job.all_stopped(); });
  ASSERT_TRUE(job.all_stopped());
  for (const auto* rt : job.runtimes) EXPECT_TRUE(rt->failure.empty()) << rt->failure;
  job.checker.finish(true);
  EXPECT_EQ(job.checker.violation_count(), 0u) << job.checker.violations().front().detail;
  const auto ignored = [](const testing::FakeRuntime& rt) {
    return std::ranges::count_if(rt.logs, [](const std::string& line) {
      return line.find("ignoring local_reduce") != std::string::npos;
    });
  };
  EXPECT_EQ(ignored(*job.runtimes[2]), 3);  // worker 0, the root
  EXPECT_EQ(ignored(*job.runtimes[3]), 3);  // worker 1
  EXPECT_EQ(ignored(*job.runtimes[1]), 1);  // the server
}

// ------------------------------------------------------------------ nccl

#define SKIP_WITHOUT_NCCL_BUILD() \
  if (!built_with_nccl()) GTEST_SKIP() << "built without NCCL: ps.local_reduce = \"nccl\" is refused"

const std::string kNccl = " --set workload.device=cuda --set ps.local_reduce=nccl";

TEST(LocalReduce, NcclSimKeepsTheModelCutsCrossHostBytesFourfoldAndMeetsItsBound) {
  SKIP_WITHOUT_NCCL_BUILD();
  const auto nccl = testing::fresh_dir("lr-sim-nccl"), again = testing::fresh_dir("lr-sim-nccl-again"),
             shm = testing::fresh_dir("lr-sim-nccl-shm"), none = testing::fresh_dir("lr-sim-nccl-none");
  const auto a =
      testing::run_pstwin(std::string("sim ") + kScenario + " -q" + kNccl + " --out " + nccl.string());
  const auto b =
      testing::run_pstwin(std::string("sim ") + kScenario + " -q" + kNccl + " --out " + again.string());
  const auto c = testing::run_pstwin(std::string("sim ") + kScenario + " -q --out " + shm.string());
  const auto d =
      testing::run_pstwin(std::string("sim ") + kScenario +
                          " -q --set workload.device=cuda --set ps.local_reduce=none --out " + none.string());
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  ASSERT_EQ(c.exit_code, 0) << c.output;
  ASSERT_EQ(d.exit_code, 0) << d.output;
  auto ra = testing::read_json(nccl / "results.json"), rb = testing::read_json(again / "results.json");
  const auto rc = testing::read_json(shm / "results.json"), rd = testing::read_json(none / "results.json");
  expect_clean(ra, a.output);
  expect_clean(rd, d.output);
  // Every worker's pull (read back from its GPU after the broadcast) equals every other's of the round:
  // 8 workers x 16 partitions x 5 iterations, as without local reduce.
  EXPECT_EQ(ra["invariants"]["by_invariant"]["sync_identical"]["checked"], 640);
  EXPECT_EQ(rd["invariants"]["by_invariant"]["sync_identical"]["checked"], 640);
  EXPECT_FALSE(ra["model_digest"].get<std::string>().empty());
  EXPECT_EQ(ra["model_digest"], rc["model_digest"]);
  EXPECT_EQ(ra["model_digest"], rd["model_digest"]);
  // The roots push and pull what shm's do; a quarter of what every worker's pushes and pulls carry.
  EXPECT_EQ(push_pull_bytes(ra), push_pull_bytes(rc));
  EXPECT_EQ(4 * push_pull_bytes(ra), push_pull_bytes(rd));
  ASSERT_TRUE(ra["bound"].is_object());
  const double bound = ra["bound"]["time_s"], achieved = ra["mean_iteration_s"];
  EXPECT_NE(ra["bound"]["formula"].get<std::string>().find("ps.local_reduce = nccl"), std::string::npos);
  EXPECT_GE(achieved, bound);
  EXPECT_LE(achieved, 1.05 * bound) << ra["bound"]["formula"];
  EXPECT_LT(achieved, rd["mean_iteration_s"].get<double>());
  ra.erase("wall_s");
  rb.erase("wall_s");
  EXPECT_TRUE(ra == rb) << "two runs of the same scenario wrote different results.json";
  const auto trace = testing::read_text(nccl / "trace.json");
  EXPECT_TRUE(trace == testing::read_text(again / "trace.json")) << "and different traces";
  for (const char* span : {"nccl reduce", "nccl broadcast", "sum copy-out", "sum copy-in", "group join"})
    EXPECT_NE(trace.find(span), std::string::npos) << span;
  EXPECT_EQ(trace.find("host reduce"), std::string::npos);
}

// The emulated groups read each member's inputs when that member's call runs: with every lane task
// jittered and no compute to space the iterations, the simulator runs the members' calls in other
// orders, and the sums and every worker's pulls stay exact.
TEST(LocalReduce, NcclEmulationIsExactWhateverOrderTheSimulatorRunsTheMembersIn) {
  SKIP_WITHOUT_NCCL_BUILD();
  const std::string sets = kNccl +
                           " --set perturbation.executor_jitter=1ms --set workload.compute=0ms"
                           " --set invariants.bound_tolerance=0 --set output.trace=false";
  for (const char* seed : {"1", "2", "3"}) {
    SCOPED_TRACE(std::string("seed ") + seed);
    const auto dir = testing::fresh_dir(std::string("lr-nccl-jitter-") + seed);
    const auto r = testing::run_pstwin(std::string("sim ") + kScenario + " -q --seed " + seed + sets +
                                       " --out " + dir.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto results = testing::read_json(dir / "results.json");
    expect_clean(results, r.output);
    EXPECT_EQ(results["model_digest"], "7e9e07e61edd3f7a");  // docs/HARDWARE.md: every mode's
    EXPECT_EQ(results["invariants"]["by_invariant"]["sync_identical"]["checked"], 640);
  }
}

// "nccl" charges the reduce and the broadcast at I between the GPUs and the root's two PCIe copies at X:
// the bound of 2 hosts x 4 GPUs is that of two workers alone on their hosts plus one partition of each.
TEST(LocalReduce, NcclBoundCountsTheCollectivesAndTheRootsPcieCopies) {
  SKIP_WITHOUT_NCCL_BUILD();
  const auto load = [](std::vector<std::pair<std::string, std::string>> sets) {
    sets.emplace_back("workload.device", "cuda");
    return load_scenario(kScenarioFile, sets);
  };
  const Scenario sc = load({{"ps.local_reduce", "nccl"}});
  const auto bound = analytic_bound(sc, SyntheticWorkload(sc), 1, 1, 0);
  ASSERT_TRUE(bound);
  EXPECT_NE(bound->formula.find("n=2 pushing hosts (ps.local_reduce = nccl), k=4"), std::string::npos)
      << bound->formula;
  const Scenario plain =
      load({{"ps.local_reduce", "none"}, {"roles.workers", "2"}, {"roles.worker_hosts", "[\"h3\", \"h4\"]"}});
  const auto plain_bound = analytic_bound(plain, SyntheticWorkload(plain), 1, 1, 0);
  ASSERT_TRUE(plain_bound);
  EXPECT_NEAR(bound->time_s - plain_bound->time_s, 2 * 2e6 / 100e9 + 2 * 2e6 / 12e9, 1e-9);
  // Slow links between the GPUs: the collective lane's 2 x 32 MB bounds the iteration; k does not count.
  const Scenario slow = load({{"ps.local_reduce", "nccl"}, {"cluster.intra_host_bandwidth", "1GBps"}});
  const auto slower = analytic_bound(slow, SyntheticWorkload(slow), 1, 1, 0);
  ASSERT_TRUE(slower);
  EXPECT_NEAR(slower->time_s, 0.01 + 2 * 32e6 / 1e9 + 4 * 5e-6, 1e-9);
  // A slow PCIe link: the root's copy lane, 2 x 32 MB at X, does.
  const Scenario pcie = load({{"ps.local_reduce", "nccl"}, {"cluster.pcie_bandwidth", "1GBps"}});
  const auto copies = analytic_bound(pcie, SyntheticWorkload(pcie), 1, 1, 0);
  ASSERT_TRUE(copies);
  EXPECT_NEAR(copies->time_s, 0.01 + 2 * 32e6 / 1e9 + 2 * 2e6 / 100e9 + 4 * 5e-6, 1e-9);
}

TEST(LocalReduce, NcclRefusalsNameTheFieldAndExitTwo) {
  const auto dir = testing::fresh_dir("lr-nccl-refused");
  if (!built_with_nccl()) {
    const std::string error = error_of({{"ps.local_reduce", "nccl"}, {"workload.device", "cuda"}});
    EXPECT_NE(error.find("ps.local_reduce"), std::string::npos) << error;
    const auto refused =
        testing::run_pstwin(std::string("sim ") + kScenario + " -q" + kNccl + " --out " + dir.string());
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    GTEST_SKIP() << "built without NCCL: only the refusal of \"nccl\" itself is checked";
  }
  struct Case {
    std::vector<std::pair<std::string, std::string>> overrides;
    std::string field;  // the field the error starts with
    std::string says;
  };
  const std::vector<Case> cases{
      {{{"workload.device", "cpu"}},
       "ps.local_reduce",
       "set workload.device = \"cuda\", or use ps.local_reduce = \"shm\""},
      {{{"ps.mode", "async"}}, "ps.local_reduce", "ps.mode = \"async\""},
      {{{"ps.balancing", "lb"}}, "ps.local_reduce", "ps.balancing"},
      {{{"workload.layerwise", "true"}}, "ps.local_reduce", "workload.layerwise"},
      {{{"ps.backup_workers", "1"}}, "ps.local_reduce", "ps.backup_workers"},
      {{{"ps.on_worker_loss", "continue"}}, "ps.local_reduce", "ps.on_worker_loss"},
      // The MLP on "cuda" is a device path of its own, but the servers need each worker's gradient.
      {{{"workload.kind", "mlp"}}, "ps.local_reduce", "workload.kind = \"synthetic\""},
      // The device path itself refuses this first.
      {{{"staging.enabled", "false"}}, "workload.device", "staging.enabled = true"},
  };
  for (const auto& [overrides, field, says] : cases) {
    auto sets = overrides;
    sets.emplace_back("ps.local_reduce", "nccl");
    if (overrides.front().first != "workload.device") sets.emplace_back("workload.device", "cuda");
    const std::string error = error_of(sets);
    SCOPED_TRACE(overrides.front().first);
    EXPECT_NE(error.find(field + " = "), std::string::npos) << error;
    EXPECT_NE(error.find(says), std::string::npos) << error;
  }
  EXPECT_EQ(error_of({{"ps.local_reduce", "nccl"}, {"workload.device", "cuda"}}), "");
  // "shm" keeps its refusal of device tensors: those are "nccl"'s.
  EXPECT_NE(error_of({{"workload.device", "cuda"}}).find("would need \"nccl\""), std::string::npos);
  for (const char* command : {"sim", "run"}) {
    const auto refused = testing::run_pstwin(std::string(command) + " " + kScenario +
                                             " -q --set ps.local_reduce=nccl --out " + dir.string());
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_NE(refused.output.find("ps.local_reduce = \"nccl\""), std::string::npos) << refused.output;
    EXPECT_NE(refused.output.find("workload.device = \"cuda\""), std::string::npos) << refused.output;
  }
}

// A real run needs GPUs: on a machine without one `pstwin run` stops before any process starts, naming
// the missing device, as workload.device = "cuda" alone does.
TEST(LocalReduce, NcclRealRunWithoutAGpuExitsTwoNamingTheDevice) {
  SKIP_WITHOUT_NCCL_BUILD();
  const auto dir = testing::fresh_dir("lr-nccl-nogpu");
  const auto run =
      testing::run_pstwin(std::string("run ") + kScenario + " -q" + kNccl + " --out " + dir.string());
  if (run.output.find("no CUDA device") == std::string::npos && run.exit_code != 2)
    GTEST_SKIP() << "a CUDA device is present (the Cuda.Nccl* tests use it)";
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("workload.device = \"cuda\": no CUDA device: cudaGetDeviceCount"),
            std::string::npos)
      << run.output;
}

Scenario nccl_job_scenario() {
  return parse_scenario(
      "name = \"ncclhostjob\"\n[cluster]\nhosts = 4\n[roles]\nservers = 1\nworkers = 4\nserver_hosts = "
      "[\"h1\"]\nworker_hosts = [\"h2\", \"h2\", \"h2\", \"h3\"]\n[ps]\nlocal_reduce = \"nccl\"\n"
      "partition_bytes = 4096\n[workload]\ndevice = \"cuda\"\ntensor_bytes = [8192, 4096]\niterations = 3\n",
      "local-reduce-nccl-test");
}

Message nccl_message(NodeId from, NodeId to, DeviceReduceOp op, std::uint64_t key, std::uint32_t iteration,
                     bool response) {
  Message m = local_reduce(from, to, key, iteration, response);
  m.header.partition = static_cast<std::uint32_t>(op);
  return m;
}

std::size_t count_logs(const testing::FakeRuntime& rt, std::string_view text) {
  return static_cast<std::size_t>(std::ranges::count_if(
      rt.logs, [&](const std::string& line) { return line.find(text) != std::string::npos; }));
}

// The harness runs the nccl protocol with emulated GPUs: exact sums (the aggregates invariant checks
// every worker's pull, read back from its device), only the roots push, and the others never copy to
// the host: they send their root only readies, header-only.
TEST(LocalReduce, NcclHarnessJobSumsExactlyAndOnlyRootsReachTheServer) {
  SKIP_WITHOUT_NCCL_BUILD();
  HostJob job(nccl_job_scenario());
  ASSERT_NO_FATAL_FAILURE(job.run_clean());
  const auto& root_sent = job.runtimes[2]->sent;
  // Worker 0 leads h2's group: one id to each of workers 1 and 2, then per partition and iteration a
  // reduce and a broadcast to each.
  const auto ops = [&](DeviceReduceOp op, int to) {
    return std::ranges::count_if(root_sent, [&](const Message& m) {
      return m.header.command == Command::kLocalReduce &&
             m.header.partition == static_cast<std::uint32_t>(op) && m.header.recipient == worker_id(to);
    });
  };
  const auto rounds = static_cast<std::ptrdiff_t>(3 * job.workload.partitions().size());
  for (int to : {1, 2}) {
    EXPECT_EQ(ops(DeviceReduceOp::kGroupId, to), 1);
    EXPECT_EQ(ops(DeviceReduceOp::kReduce, to), rounds);
    EXPECT_EQ(ops(DeviceReduceOp::kBroadcast, to), rounds);
  }
  for (int w = 0; w < 4; ++w) {
    const auto& sent = job.runtimes[static_cast<std::size_t>(2 + w)]->sent;
    const bool pushed = std::ranges::any_of(sent, is_push);
    EXPECT_EQ(pushed, w == 0 || w == 3) << "worker " << w;
    if (w != 1 && w != 2) continue;
    for (const auto& m : sent) {
      if (m.header.command == Command::kLocalReduce) {
        EXPECT_EQ(m.payload.size(), 0u);
      }
    }
  }
}

TEST(LocalReduce, NcclForgedMessagesAreIgnoredNotFatal) {
  SKIP_WITHOUT_NCCL_BUILD();
  HostJob job(nccl_job_scenario());
  const std::uint64_t key = job.workload.partitions().front().key;
  job.start();
  job.harness.run([&] { return std::ranges::any_of(job.runtimes[2]->sent, is_push); });
  using Op = DeviceReduceOp;
  auto deliver = [&](const std::string& to, Message m) { job.harness.deliver(to, std::move(m)); };
  // To the root (worker 0): a stranger's ready, a ready of no key, of an iteration not running, and a
  // request that is no ready.
  deliver("worker0@h2", nccl_message(worker_id(3), worker_id(0), Op::kReady, key, 0, false));
  deliver("worker0@h2", nccl_message(worker_id(1), worker_id(0), Op::kReady, 999999, 0, false));
  deliver("worker0@h2", nccl_message(worker_id(1), worker_id(0), Op::kReady, key, 7, false));
  deliver("worker0@h2", nccl_message(worker_id(1), worker_id(0), Op::kReduce, key, 0, false));
  // To worker 1: collectives from another member (not the root), a second group id, a reduce and a
  // broadcast of nothing due, and an op that does not exist.
  deliver("worker1@h2", nccl_message(worker_id(2), worker_id(1), Op::kReduce, key, 0, true));
  Message id = nccl_message(worker_id(0), worker_id(1), Op::kGroupId, 0, 0, true);
  id.payload = Payload::copy_of(std::vector<std::byte>(kDeviceGroupIdBytes));
  deliver("worker1@h2", id);
  deliver("worker1@h2", nccl_message(worker_id(0), worker_id(1), Op::kReduce, key, 2, true));
  deliver("worker1@h2", nccl_message(worker_id(0), worker_id(1), Op::kBroadcast, key, 2, true));
  deliver("worker1@h2", nccl_message(worker_id(0), worker_id(1), static_cast<Op>(9), key, 0, true));
  job.harness.run([&] { return job.all_stopped(); });
  ASSERT_TRUE(job.all_stopped());
  for (const auto* rt : job.runtimes) EXPECT_TRUE(rt->failure.empty()) << rt->failure;
  job.checker.finish(true);
  EXPECT_EQ(job.checker.violation_count(), 0u) << job.checker.violations().front().detail;
  EXPECT_EQ(count_logs(*job.runtimes[2], "ignoring local_reduce"), 4u);
  EXPECT_EQ(count_logs(*job.runtimes[3], "ignoring local_reduce"), 5u);
  EXPECT_EQ(count_logs(*job.runtimes[3], "has its group already"), 1u);
}

// A device call that fails (here: worker 2's join, as ncclCommInitRank would) fails the run naming the
// worker, its device and the call; nothing crashes and the job stops.
class FailingJoin final : public DeviceTensors {
 public:
  FailingJoin(const SyntheticWorkload& workload, int rank, std::shared_ptr<EmulatedGroups> groups)
      : inner_(workload, rank, std::move(groups)), rank_(rank) {}
  std::string describe() const override { return "test GPU " + std::to_string(rank_); }
  void produce(const PartitionSpec& p, std::uint32_t i) override { inner_.produce(p, i); }
  void copy_out(const PartitionSpec& p, const std::shared_ptr<ByteBuffer>& s) override {
    inner_.copy_out(p, s);
  }
  void copy_in(const PartitionSpec& p, std::span<const float> a) override { inner_.copy_in(p, a); }
  std::vector<float> read(const PartitionSpec& p) override { return inner_.read(p); }
  std::vector<std::byte> new_group_id() override { return inner_.new_group_id(); }
  std::unique_ptr<DeviceGroup> join_group(std::span<const std::byte> id, int member, int members) override {
    if (rank_ == 2) throw DeviceError("ncclCommInitRank(rank 2 of 3 on test GPU 2): unhandled system error");
    return inner_.join_group(id, member, members);
  }

 private:
  EmulatedDevice inner_;
  const int rank_;
};

TEST(LocalReduce, NcclDeviceErrorFailsTheRunNamingTheWorkerAndTheCall) {
  SKIP_WITHOUT_NCCL_BUILD();
  auto groups = std::make_shared<EmulatedGroups>();
  HostJob job(nccl_job_scenario(), [groups](const SyntheticWorkload& workload, int rank) {
    return std::make_unique<FailingJoin>(workload, rank, groups);
  });
  job.start();
  job.harness.run([&] { return !job.runtimes[4]->failure.empty(); });
  EXPECT_EQ(job.runtimes[4]->failure,
            "worker 2 (test GPU 2): ncclCommInitRank(rank 2 of 3 on test GPU 2): unhandled system error");
}

}  // namespace
}  // namespace pstwin
