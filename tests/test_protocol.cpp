// Protocol state machines (scheduler, server, worker) driven by the in-process harness: every
// message and timer in a deterministic order, no simulator involved.
#include <gtest/gtest.h>

#include <algorithm>

#include "harness.hpp"
#include "ps/ids.hpp"
#include "ps/invariants.hpp"
#include "ps/scheduler.hpp"
#include "ps/server.hpp"
#include "ps/worker.hpp"
#include "zeno/roles.hpp"

namespace pstwin {
namespace {

using testing::FakeRuntime;
using testing::Harness;

// Records the order of protocol events so tests can assert what happened before what.
class EventLog final : public RunObserver {
 public:
  void node_table(const std::vector<NodeInfo>& t, Seconds) override {
    table = t;
    events.push_back("table");
  }
  void barrier_released(int group, Seconds) override { events.push_back("barrier " + std::to_string(group)); }
  void push_applied(NodeId, int worker, std::uint64_t key, std::uint32_t it) override {
    events.push_back("push w" + std::to_string(worker) + " k" + std::to_string(key) + " i" +
                     std::to_string(it));
  }
  void duplicate_push(NodeId, int worker, std::uint64_t, std::uint32_t) override {
    ++duplicates;
    events.push_back("duplicate w" + std::to_string(worker));
  }
  void pull_received(int worker, std::uint64_t key, std::uint32_t it, const Payload& value) override {
    if (!value.is_phantom())
      pulled[{worker, key, it}] = std::vector<float>(value.floats().begin(), value.floats().end());
  }
  void final_store(NodeId, std::uint64_t key, const Payload& store) override {
    finals[key] = std::vector<float>(store.floats().begin(), store.floats().end());
  }
  std::size_t index_of(const std::string& prefix) const {
    for (std::size_t i = 0; i < events.size(); ++i)
      if (events[i].rfind(prefix, 0) == 0) return i;
    return events.size();
  }
  std::vector<std::string> events;
  std::vector<NodeInfo> table;
  std::map<std::tuple<int, std::uint64_t, std::uint32_t>, std::vector<float>> pulled;
  std::map<std::uint64_t, std::vector<float>> finals;
  int duplicates = 0;
};

// Sends what a node's registration would, from a bare runtime.
void register_as(FakeRuntime& rt, Role role, int rank, const std::string& host = "hx") {
  rt.connect(kSchedulerId, "scheduler@h0");
  Message m;
  m.header.recipient = kSchedulerId;
  m.header.command = Command::kRegister;
  m.payload = encode_node_info({kNoNode, role, rank, rt.local_address(), host});
  rt.send(std::move(m));
}

Scenario small_scenario(std::string_view mode = "sync", int servers = 2, int workers = 3,
                        std::string_view push_pull = "separate") {
  const std::string text =
      "name = \"protocol\"\n[roles]\nservers = " + std::to_string(servers) +
      "\nworkers = " + std::to_string(workers) + "\n[ps]\nmode = \"" + std::string(mode) +
      "\"\npush_pull = \"" + std::string(push_pull) +
      "\"\npartition_bytes = 4096\n[workload]\ntensor_bytes = [8192, 4096, 1024]\niterations = 3\n";
  return parse_scenario(text, "protocol-test");
}

// A whole job on the harness: scheduler, servers, workers, and the invariant checker.
struct Job {
  explicit Job(const Scenario& s)
      : scenario(s),
        roles(scenario),
        workload(roles.workload()),
        checker(scenario, workload),
        fan({&checker, &log}) {
    auto& sched_rt = harness.add("scheduler@h0");
    scheduler = roles.make(Role::kScheduler, 0, sched_rt, fan, "");
    sched_rt.node = scheduler.get();
    runtimes.push_back(&sched_rt);
    for (int r = 0; r < scenario.roles.servers; ++r) {
      auto& rt = harness.add("server" + std::to_string(r) + "@h1", "h1");
      nodes.push_back(roles.make(Role::kServer, r, rt, fan, "scheduler@h0"));
      rt.node = nodes.back().get();
      runtimes.push_back(&rt);
    }
    for (int r = 0; r < scenario.roles.workers; ++r) {
      auto& rt = harness.add("worker" + std::to_string(r) + "@h2", "h2");
      nodes.push_back(roles.make(Role::kWorker, r, rt, fan, "scheduler@h0"));
      rt.node = nodes.back().get();
      runtimes.push_back(&rt);
    }
  }
  void start_all() {
    for (auto* rt : runtimes) rt->node->start();
  }
  bool all_stopped() const {
    return std::all_of(runtimes.begin(), runtimes.end(), [](const FakeRuntime* rt) { return rt->stopped; });
  }
  Scenario scenario;
  zeno::JobRoles roles;
  const SyntheticWorkload& workload;
  InvariantChecker checker;
  EventLog log;
  ObserverFanout fan;
  Harness harness;
  std::unique_ptr<Node> scheduler;
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<FakeRuntime*> runtimes;
};

TEST(Protocol, BootstrapAssignsPsLiteIdsAndBarrierPrecedesTraffic) {
  Job job(small_scenario());
  job.start_all();
  job.harness.run([&] { return job.all_stopped(); });
  ASSERT_TRUE(job.all_stopped());
  for (auto* rt : job.runtimes) EXPECT_EQ(rt->failure, "") << rt->local_address();
  ASSERT_EQ(job.log.table.size(), 5u);
  std::map<std::string, NodeId> ids;
  for (const auto& info : job.log.table) ids[info.address] = info.id;
  EXPECT_EQ(ids["server0@h1"], 8);
  EXPECT_EQ(ids["server1@h1"], 10);
  EXPECT_EQ(ids["worker0@h2"], 9);
  EXPECT_EQ(ids["worker1@h2"], 11);
  EXPECT_EQ(ids["worker2@h2"], 13);
  // Every node learned its id from the table.
  for (std::size_t i = 1; i < job.runtimes.size(); ++i)
    EXPECT_EQ(job.runtimes[i]->self(), ids[job.runtimes[i]->local_address()]);
  // The table came first, then the all-groups barrier, then the first push.
  const auto table_at = job.log.index_of("table");
  const auto barrier_at = job.log.index_of("barrier " + std::to_string(kAllGroups));
  const auto push_at = job.log.index_of("push");
  EXPECT_LT(table_at, barrier_at);
  EXPECT_LT(barrier_at, push_at);
  EXPECT_LT(push_at, job.log.events.size());
  job.checker.finish(true);
  EXPECT_EQ(job.checker.violation_count(), 0u);
  EXPECT_GT(job.checker.checked(), 0u);
}

TEST(Protocol, BarrierWaitsForTheLastNode) {
  Job job(small_scenario());
  // Everybody but the last worker starts; nothing may be pushed, no barrier released.
  for (std::size_t i = 0; i + 1 < job.runtimes.size(); ++i) job.runtimes[i]->node->start();
  job.harness.run({}, 0.5);
  EXPECT_EQ(job.log.index_of("barrier"), job.log.events.size());
  EXPECT_EQ(job.log.index_of("push"), job.log.events.size());
  EXPECT_TRUE(job.log.table.empty());
  job.runtimes.back()->node->start();
  job.harness.run([&] { return job.all_stopped(); });
  EXPECT_TRUE(job.all_stopped());
  EXPECT_LT(job.log.index_of("barrier"), job.log.index_of("push"));
}

TEST(Protocol, PushOvertakingTheServersBarrierReleaseIsKeptNotDropped) {
  Job job(small_scenario("sync", 1, 2));
  // The server's barrier release is held back until a worker's push has reached the server.
  bool push_seen = false;
  job.harness.hold_if = [&](std::string_view address, const Message& m) {
    if (address != "server0@h1") return false;
    if (m.header.command == Command::kPush) push_seen = true;
    return m.header.command == Command::kBarrier || (m.header.command == Command::kPush && !push_seen);
  };
  job.start_all();
  job.harness.run([&] { return push_seen; });
  ASSERT_TRUE(push_seen);
  job.harness.release_held();
  job.harness.run([&] { return job.all_stopped(); });
  ASSERT_TRUE(job.all_stopped());
  for (const auto& line : job.runtimes[1]->logs) EXPECT_EQ(line.find("dropping"), std::string::npos) << line;
  job.checker.finish(true);
  EXPECT_EQ(job.checker.violation_count(), 0u);
}

TEST(Protocol, RanksWithoutRequestFollowAddressOrderNotArrival) {
  Scenario s = small_scenario("sync", 1, 2);
  SyntheticWorkload workload(s);
  EventLog log;
  Harness harness;
  auto& sched_rt = harness.add("scheduler@h0");
  Scheduler scheduler(sched_rt, scheduler_options(s), log);
  sched_rt.node = &scheduler;
  scheduler.start();
  // Registrations arrive in reverse address order, none asking for a rank.
  for (std::string address : {"c@h3", "b@h2", "a@h1"})
    register_as(harness.add(address, "hx"), address == "a@h1" ? Role::kServer : Role::kWorker, -1);
  harness.run({}, 0.1);
  ASSERT_EQ(log.table.size(), 3u);
  EXPECT_EQ(log.table[0].address, "a@h1");
  EXPECT_EQ(log.table[0].id, server_id(0));
  EXPECT_EQ(log.table[1].address, "b@h2");
  EXPECT_EQ(log.table[1].id, worker_id(0));
  EXPECT_EQ(log.table[2].address, "c@h3");
  EXPECT_EQ(log.table[2].id, worker_id(1));
}

TEST(Protocol, DuplicateWorkerRankFailsNamingTheVariable) {
  Scenario s = small_scenario("sync", 1, 2);
  EventLog log;
  Harness harness;
  auto& sched_rt = harness.add("scheduler@h0");
  Scheduler scheduler(sched_rt, scheduler_options(s), log);
  sched_rt.node = &scheduler;
  scheduler.start();
  for (std::string address : {"w1@h1", "w2@h2"}) register_as(harness.add(address), Role::kWorker, 0);
  harness.run({}, 0.1);
  EXPECT_NE(sched_rt.failure.find("DMLC_WORKER_ID"), std::string::npos) << sched_rt.failure;
  EXPECT_NE(sched_rt.failure.find("w1@h1"), std::string::npos);
}

TEST(Protocol, MalformedRegistrationIsRejectedNotFatal) {
  Scenario s = small_scenario("sync", 1, 1);
  EventLog log;
  Harness harness;
  auto& sched_rt = harness.add("scheduler@h0");
  Scheduler scheduler(sched_rt, scheduler_options(s), log);
  sched_rt.node = &scheduler;
  scheduler.start();
  auto& rt = harness.add("x@h1");
  rt.connect(kSchedulerId, "scheduler@h0");
  const std::vector<std::byte> garbage{std::byte{1}, std::byte{2}, std::byte{3}};
  Message m;
  m.header.recipient = kSchedulerId;
  m.header.command = Command::kRegister;
  m.payload = Payload::copy_of(garbage);
  rt.send(std::move(m));
  harness.run({}, 0.1);
  EXPECT_EQ(sched_rt.failure, "");
  ASSERT_FALSE(sched_rt.logs.empty());
  EXPECT_NE(sched_rt.logs.back().find("malformed registration"), std::string::npos) << sched_rt.logs.back();
}

TEST(Protocol, UnreachableSchedulerIsReportedWithinTheConnectTimeout) {
  Scenario s = small_scenario("sync", 1, 1);
  s.ps.connect_timeout_s = 3;
  EventLog log;
  Harness harness;
  harness.unreachable.push_back("scheduler@10.0.0.1:1234");
  auto& rt = harness.add("worker0@h1", "h1");
  const zeno::JobRoles roles(s);
  Worker worker(NodeContext{rt, log, "scheduler@10.0.0.1:1234", control_options(s)}, 0, worker_options(s),
                roles.shape());
  rt.node = &worker;
  worker.start();
  harness.run([&] { return rt.stopped; });
  ASSERT_TRUE(rt.stopped);
  EXPECT_DOUBLE_EQ(harness.now(), 3.0);
  EXPECT_NE(rt.failure.find("cannot reach the scheduler at scheduler@10.0.0.1:1234"), std::string::npos)
      << rt.failure;
  EXPECT_NE(rt.failure.find("DMLC_PS_ROOT_URI"), std::string::npos);
}

class PushPullModes : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Protocol, PushPullModes, ::testing::Values("separate", "fused"));

TEST_P(PushPullModes, SyncAggregatesAreExactSumsAndIdenticalOnAllWorkers) {
  Job job(small_scenario("sync", 2, 3, GetParam()));
  job.start_all();
  job.harness.run([&] { return job.all_stopped(); });
  ASSERT_TRUE(job.all_stopped());
  job.checker.finish(true);
  EXPECT_EQ(job.checker.violation_count(), 0u) << job.checker.violations().front().detail;
  // Independently recompute one aggregate: sum over workers of what each pushed.
  for (const auto& p : job.workload.partitions()) {
    for (std::uint32_t it = 0; it < 3; ++it) {
      std::vector<float> expected(p.bytes / 4, 0.0f);
      for (int w = 0; w < 3; ++w) {
        std::vector<float> mine(p.bytes / 4);
        job.workload.fill(w, it, p.key, mine);
        for (std::size_t j = 0; j < mine.size(); ++j) expected[j] += mine[j];
      }
      for (int w = 0; w < 3; ++w) EXPECT_EQ(job.log.pulled.at({w, p.key, it}), expected) << "key " << p.key;
    }
  }
}

TEST_P(PushPullModes, AsyncStoresHoldEveryPushExactlyOnce) {
  Job job(small_scenario("async", 2, 3, GetParam()));
  job.start_all();
  job.harness.run([&] { return job.all_stopped(); });
  ASSERT_TRUE(job.all_stopped());
  job.checker.finish(true);
  EXPECT_EQ(job.checker.violation_count(), 0u);
  ASSERT_EQ(job.log.finals.size(), job.workload.partitions().size());
  for (const auto& p : job.workload.partitions()) {
    std::vector<float> expected(p.bytes / 4, 0.0f);
    for (std::uint32_t it = 0; it < 3; ++it)
      for (int w = 0; w < 3; ++w) {
        std::vector<float> mine(p.bytes / 4);
        job.workload.fill(w, it, p.key, mine);
        for (std::size_t j = 0; j < mine.size(); ++j) expected[j] += mine[j];
      }
    EXPECT_EQ(job.log.finals.at(p.key), expected);
  }
}

TEST(Protocol, CheckerCatchesACorruptedAggregate) {
  Scenario s = small_scenario("sync", 1, 2);
  SyntheticWorkload workload(s);
  InvariantChecker checker(s, workload);
  const auto& p = workload.partitions().front();
  // Worker 1's values twice instead of worker 0 + worker 1: the crossed-line signature.
  std::vector<float> crossed(p.bytes / 4);
  workload.fill(1, 0, p.key, crossed);
  for (auto& v : crossed) v *= 2;
  checker.aggregate_complete(server_id(0), p.key, 0, Payload::copy_of(std::as_bytes(std::span(crossed))));
  ASSERT_EQ(checker.violation_count(), 1u);
  EXPECT_EQ(checker.violations()[0].invariant, "aggregates");
  EXPECT_NE(checker.violations()[0].detail.find("key " + std::to_string(p.key)), std::string::npos);
}

// A scheduler and one real server with hand-driven "workers" that register and, once they have the
// node table, ask for a barrier of `group`; what they do next is up to the test.
struct ServerAndPuppets {
  struct Puppet final : Node {
    FakeRuntime& rt;
    int rank;
    int group;
    Puppet(FakeRuntime& r, int k, int g) : rt(r), rank(k), group(g) {}
    void start() override { register_as(rt, Role::kWorker, rank, "h2"); }
    void on_message(Message m) override {
      if (m.header.command != Command::kNodeTable) return;
      std::string error;
      const auto table = decode_node_table(m.payload, error);
      ASSERT_TRUE(table.has_value()) << error;
      for (const auto& info : *table) {
        rt.connect(info.id, info.address);
        if (info.address == rt.local_address()) rt.set_self(info.id);
      }
      Message b;
      b.header.recipient = kSchedulerId;
      b.header.command = Command::kBarrier;
      b.header.key = static_cast<std::uint64_t>(group);
      rt.send(std::move(b));
    }
    std::string describe_state() const override { return ""; }
  };
  ServerAndPuppets(int workers, int group)
      : scenario(small_scenario("sync", 1, workers)),
        roles(scenario),
        sched_rt(harness.add("scheduler@h0")),
        scheduler(sched_rt, scheduler_options(scenario), log),
        server_rt(harness.add("server0@h1", "h1")),
        server(NodeContext{server_rt, log, "scheduler@h0", control_options(scenario)}, 0,
               server_options(scenario), roles.shape()) {
    sched_rt.node = &scheduler;
    server_rt.node = &server;
    for (int r = 0; r < workers; ++r) {
      auto& rt = harness.add("worker" + std::to_string(r) + "@h2", "h2");
      puppets.push_back(std::make_unique<Puppet>(rt, r, group));
      rt.node = puppets.back().get();
    }
  }
  void start() {
    scheduler.start();
    server.start();
    for (auto& puppet : puppets) puppet->start();
  }
  Scenario scenario;
  zeno::JobRoles roles;
  EventLog log;
  Harness harness;
  FakeRuntime& sched_rt;
  Scheduler scheduler;
  FakeRuntime& server_rt;
  Server server;
  std::vector<std::unique_ptr<Puppet>> puppets;
};

TEST(Protocol, SecondPushInOneRoundIsRefusedAndReported) {
  // Two workers that pass the barrier, then misbehave.
  ServerAndPuppets job(2, kAllGroups);
  auto& log = job.log;
  auto& harness = job.harness;
  auto& workload = job.roles.workload();
  FakeRuntime& worker0 = job.puppets[0]->rt;
  job.start();
  harness.run({}, 0.5);
  const auto& part = workload.partitions().front();
  for (int i = 0; i < 2; ++i) {
    std::vector<float> values(part.bytes / 4);
    workload.fill(0, 0, part.key, values);
    Message push;
    push.header.recipient = server_id(0);
    push.header.command = Command::kPush;
    push.header.key = part.key;
    push.payload = Payload::copy_of(std::as_bytes(std::span(values)));
    worker0.send(std::move(push));
  }
  harness.run({}, 0.6);
  EXPECT_EQ(log.duplicates, 1);
  EXPECT_EQ(std::count_if(log.events.begin(), log.events.end(),
                          [](const std::string& e) { return e.rfind("push w0", 0) == 0; }),
            1);
}

TEST(Protocol, ABarrierRequestFromOutsideItsGroupIsNotCounted) {
  // Two workers that ask for a barrier of the servers' group, to which they do not belong: counted,
  // two arrivals would release the one-server group.
  ServerAndPuppets job(2, kServerGroup);
  job.start();
  auto& log = job.log;
  auto& sched_rt = job.sched_rt;
  job.harness.run({}, 0.5);
  EXPECT_EQ(log.index_of("barrier " + std::to_string(kServerGroup)), log.events.size());
  EXPECT_EQ(std::count_if(sched_rt.logs.begin(), sched_rt.logs.end(),
                          [](const std::string& line) {
                            return line.find("ignoring a barrier request of group 2") != std::string::npos;
                          }),
            2);
}

TEST(Protocol, NodeTableViewsReadWhatTheTableDecodesToAndRefuseWhatItRefuses) {
  const std::vector<NodeInfo> table{{kSchedulerId, Role::kScheduler, 0, "scheduler0@h0", "h0"},
                                    {server_id(0), Role::kServer, 0, "server0@h1", "h1"},
                                    {worker_id(7), Role::kWorker, 7, "worker7@rack3-host12", ""}};
  const Payload body = encode_node_table(table);
  std::string error;
  const auto views = decode_node_table_views(body, error);
  ASSERT_TRUE(views.has_value()) << error;
  ASSERT_EQ(views->size(), table.size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ((*views)[i].id, table[i].id);
    EXPECT_EQ((*views)[i].role, table[i].role);
    EXPECT_EQ((*views)[i].rank, table[i].rank);
    EXPECT_EQ((*views)[i].address, table[i].address);
    EXPECT_EQ((*views)[i].host, table[i].host);
  }
  // Every truncation, a trailing byte and an unknown role: refused alike, with the same field named.
  const auto bytes = body.bytes();
  std::vector<Payload> bad;
  for (std::size_t n = 0; n < bytes.size(); ++n) bad.push_back(Payload::copy_of(bytes.first(n)));
  std::vector<std::byte> longer(bytes.begin(), bytes.end());
  longer.push_back(std::byte{0});
  bad.push_back(Payload::copy_of(longer));
  std::vector<std::byte> role(bytes.begin(), bytes.end());
  role[4 + 4] = std::byte{0x7f};  // the first entry's role, after the count and its id
  bad.push_back(Payload::copy_of(role));
  for (const auto& payload : bad) {
    std::string table_error;
    std::string view_error;
    EXPECT_FALSE(decode_node_table(payload, table_error).has_value());
    EXPECT_FALSE(decode_node_table_views(payload, view_error).has_value());
    EXPECT_FALSE(table_error.empty());
    EXPECT_EQ(view_error, table_error);
  }
}

TEST(Protocol, SilentNodeIsDeclaredDeadAfterHeartbeatTimeout) {
  Scenario s = small_scenario("sync", 1, 1);
  s.ps.heartbeat_interval_s = 1;
  s.ps.heartbeat_timeout_s = 4;
  s.workload.compute_s = 0;
  Job job(s);
  job.start_all();
  // Let bootstrap finish, then silence the worker before it can do anything more.
  job.harness.run([&] { return !job.log.table.empty(); });
  job.runtimes.back()->stopped = true;
  job.harness.run([&] { return job.runtimes.front()->stopped; }, 100);
  const auto& failure = job.runtimes.front()->failure;
  EXPECT_NE(failure.find("worker 0"), std::string::npos) << failure;
  EXPECT_NE(failure.find("presumed dead"), std::string::npos) << failure;
  EXPECT_GE(job.harness.now(), 4.0);
  EXPECT_LE(job.harness.now(), 6.0);
}

// One server, two workers; heartbeats every 1 s, a node silent for 4 s presumed dead.
Scenario short_heartbeats() {
  Scenario s = small_scenario("sync", 1, 2);
  s.ps.heartbeat_interval_s = 1;
  s.ps.heartbeat_timeout_s = 4;
  return s;
}

// The scheduler does not only fail itself: every live node is told which node failed and why.
TEST(Protocol, SchedulerTellsEveryLiveNodeWhichNodeWentSilent) {
  Job job(short_heartbeats());
  job.start_all();
  job.harness.run([&] { return !job.log.table.empty(); });
  FakeRuntime& silent = *job.runtimes.back();  // worker 1
  silent.stopped = true;
  job.harness.run([&] { return job.all_stopped(); }, 100);
  EXPECT_NE(job.runtimes[0]->failure.find("worker 1 (node 11 at worker1@h2) sent no heartbeat for"),
            std::string::npos)
      << job.runtimes[0]->failure;
  for (FakeRuntime* rt : {job.runtimes[1], job.runtimes[2]}) {  // the server and worker 0
    EXPECT_EQ(rt->failure.rfind("the job ended: worker 1 (node 11 at worker1@h2) sent no heartbeat", 0), 0u)
        << rt->local_address() << ": " << rt->failure;
  }
  EXPECT_EQ(silent.failure, "");
  EXPECT_LE(job.harness.now(), 6.0);
}

// A node that fails says so (Node::on_failing) and the scheduler passes it on at once, naming the node.
TEST(Protocol, ANodesOwnFailureReachesEveryOtherNodeAtOnce) {
  Scenario s = small_scenario("sync", 1, 2);
  s.ps.heartbeat_timeout_s = 100;
  Job job(s);
  job.start_all();
  job.harness.run([&] { return job.log.index_of("push") < job.log.events.size(); });  // running
  job.runtimes[2]->fail("interrupted by SIGTERM: stopped before the job ended");      // worker 0
  const Seconds at = job.harness.now();
  job.harness.run([&] { return job.all_stopped(); }, 100);
  EXPECT_EQ(job.runtimes[0]->failure,
            "worker 0 (node 9 at worker0@h2) failed: interrupted by SIGTERM: stopped before the job ended");
  for (FakeRuntime* rt : {job.runtimes[1], job.runtimes[3]})
    EXPECT_EQ(
        rt->failure,
        "the job ended: worker 0 (node 9 at worker0@h2) failed: interrupted by SIGTERM: stopped before the "
        "job ended")
        << rt->local_address();
  EXPECT_LT(job.harness.now() - at, 1.0);
}

// A node whose scheduler went silent does not wait forever: it fails naming the scheduler.
TEST(Protocol, NodesNoticeASilentSchedulerWithinTheHeartbeatTimeout) {
  // The workers finish their iterations and wait for a shutdown that never comes (virtual time only
  // advances once they are idle).
  Job job(short_heartbeats());
  job.start_all();
  job.harness.run([&] { return job.log.index_of("push") < job.log.events.size(); });  // running
  job.runtimes[0]->stopped = true;  // the scheduler, killed: it says nothing
  const Seconds at = job.harness.now();
  job.harness.run([&] { return job.all_stopped(); }, 100);
  for (std::size_t i = 1; i < job.runtimes.size(); ++i)
    EXPECT_NE(job.runtimes[i]->failure.find("the scheduler (node 1 at scheduler@h0) sent nothing for"),
              std::string::npos)
        << job.runtimes[i]->failure;
  EXPECT_LE(job.harness.now() - at, 4.0 + 1.0 + 1e-9);
}

// Job-ending control messages count only from the scheduler: a fatal notice or a shutdown from a peer
// is logged and ignored, and the job completes.
TEST(Protocol, FatalAndShutdownFromAnyoneButTheSchedulerAreIgnored) {
  Job job(small_scenario("sync", 1, 2));
  job.start_all();
  job.harness.run([&] { return job.log.index_of("push") < job.log.events.size(); });  // running
  for (Command command : {Command::kFatal, Command::kShutdown}) {
    Message m;
    m.header.recipient = server_id(0);
    m.header.command = command;
    m.payload = encode_text("forged");
    job.runtimes[2]->send(std::move(m));  // from worker 0 to the server
  }
  job.harness.run([&] { return job.all_stopped(); });
  for (auto* rt : job.runtimes) EXPECT_EQ(rt->failure, "") << rt->local_address();
  const auto& logs = job.runtimes[1]->logs;
  EXPECT_EQ(std::count_if(logs.begin(), logs.end(),
                          [](const std::string& l) {
                            return l.find("only the scheduler (node 1) sends it") != std::string::npos;
                          }),
            2);
}

// A node configured for another job is refused at registration and told which fields differ; the
// scheduler keeps waiting for the node it needs.
TEST(Protocol, RegistrationWithAnotherScenarioIsRefusedNamingDigestsAndFields) {
  Scenario s = small_scenario("sync", 1, 1);
  Job job(s);
  Scenario other = s;
  other.ps.partition_bytes = 8192;
  auto& stranger_rt = job.harness.add("stranger@h3", "h3");
  EventLog log;
  const zeno::JobRoles other_roles(other);
  Worker stranger(NodeContext{stranger_rt, log, "scheduler@h0", control_options(other)}, 0,
                  worker_options(other), other_roles.shape());
  stranger_rt.node = &stranger;
  job.runtimes[0]->node->start();
  stranger.start();
  job.harness.run([&] { return stranger_rt.stopped; }, 1);
  const std::string& failure = stranger_rt.failure;
  EXPECT_NE(failure.find("refused the registration of worker 0"), std::string::npos) << failure;
  EXPECT_NE(failure.find("this node's scenario digest " + job_digest(other) + " differs from the job's " +
                         job_digest(s)),
            std::string::npos)
      << failure;
  EXPECT_NE(failure.find("ps.partition_bytes = \"8KiB\" here, \"4KiB\" in the job"), std::string::npos)
      << failure;
  EXPECT_EQ(job.runtimes[0]->failure, "");
  // The right nodes still make the job.
  for (std::size_t i = 1; i < job.runtimes.size(); ++i) job.runtimes[i]->node->start();
  job.harness.run([&] { return job.all_stopped(); });
  for (auto* rt : job.runtimes) EXPECT_EQ(rt->failure, "") << rt->local_address();
}

}  // namespace
}  // namespace pstwin
