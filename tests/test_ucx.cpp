// The UCX van (UcxNodeRuntime) on 127.0.0.1, over whatever transports UCX picks here (shared memory
// between the nodes of a process or a host, TCP otherwise): every shipped sync scenario with real
// payloads ends with the simulator's model, in one process and as `pstwin run --van ucx`; large
// messages take UCX's rendezvous path; a malformed, oversized, forged or unauthenticated message is
// refused and counted while the node goes on; a UCX_TLS that leaves no network transport is refused
// naming it. Each test skips, saying why, in a build without UCX.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/codec.hpp"
#include "ps/ids.hpp"
#include "realnet/job_auth.hpp"
#include "realnet/local_run.hpp"
#include "realnet/node_env.hpp"
#include "realnet/ucx_runtime.hpp"
#include "scenario/scenario.hpp"
#include "sim/simulation.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using realnet::Van;

#define SKIP_WITHOUT_UCX() \
  if (const auto missing = realnet::van_unavailable(Van::kUcx); !missing.empty()) GTEST_SKIP() << missing

std::string problems(const RunReport& report) {
  std::string out = report.failure;
  for (const auto& v : report.violations) out += "\n" + v.invariant + ": " + v.detail;
  return out;
}

realnet::LocalRunOptions over_ucx() {
  realnet::LocalRunOptions options;
  options.van = Van::kUcx;
  options.timeout_s = 120;
  options.log = [](std::string_view) {};
  return options;
}

using testing::refusals_text;
using testing::refused_from;

using testing::address_of;

// Every shipped scenario in sync mode whose messages carry real bytes (real payloads or the MLP's
// gradients), small enough for this machine in one process: 2 iterations each.
std::vector<std::pair<std::string, Scenario>> shipped_sync_scenarios() {
  std::vector<std::pair<std::string, Scenario>> out;
  for (const auto& entry : std::filesystem::directory_iterator(PSTWIN_SOURCE_DIR "/scenarios")) {
    if (entry.path().extension() != ".toml") continue;
    Scenario sc = load_scenario(entry.path().string(), {{"output.trace", "false"}});
    if (sc.ps.mode != TrainingMode::kSync || sc.workload.payload == PayloadMode::kPhantom) continue;
    if (sc.roles.workers + sc.roles.servers + sc.roles.validators > 16) continue;
    sc = load_scenario(entry.path().string(), {{"output.trace", "false"}, {"workload.iterations", "2"}});
    out.emplace_back(entry.path().filename().string(), std::move(sc));
  }
  std::ranges::sort(out, {}, &std::pair<std::string, Scenario>::first);
  return out;
}

TEST(UcxVan, EveryShippedSyncScenarioWithRealPayloadsEndsWithTheSimulatorsModel) {
  SKIP_WITHOUT_UCX();
  const auto scenarios = shipped_sync_scenarios();
  ASSERT_GE(scenarios.size(), 8u);
  std::vector<Scenario> batch;
  for (const auto& [name, sc] : scenarios) batch.push_back(sc);
  const auto simulated = sim::run_isolated(batch, 2);  // forks: before this test starts any thread
  ASSERT_EQ(simulated.size(), scenarios.size());
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    const auto& [name, sc] = scenarios[i];
    SCOPED_TRACE(name);
    ASSERT_TRUE(simulated[i].ok()) << problems(simulated[i]);
    const auto real = realnet::run_local(sc, over_ucx());
    ASSERT_TRUE(real.ok()) << problems(real);
    EXPECT_EQ(real.van, "ucx");
    EXPECT_EQ(real.violation_count, 0u);
    EXPECT_GT(real.invariants_checked, 0u);
    EXPECT_FALSE(real.model_digest.empty());
    EXPECT_EQ(real.model_digest, simulated[i].model_digest);
  }
}

// 16 MB partitions are far past UCX's eager limit on every transport: each push and pull response is
// a rendezvous, and the model is still the simulator's.
TEST(UcxVan, RendezvousSizedMessagesEndWithTheSimulatorsModel) {
  SKIP_WITHOUT_UCX();
  const Scenario sc = load_scenario(PSTWIN_SOURCE_DIR "/scenarios/fidelity_2w1s_1gbit.toml",
                                    {{"workload.iterations", "2"},
                                     {"output.trace", "false"},
                                     {"workload.tensors", "1"},
                                     {"ps.partition_bytes", "16MB"}});
  const auto simulated = sim::run_isolated({sc}, 1);
  ASSERT_TRUE(simulated[0].ok()) << problems(simulated[0]);
  const auto real = realnet::run_local(sc, over_ucx());
  ASSERT_TRUE(real.ok()) << problems(real);
  EXPECT_EQ(real.model_digest, simulated[0].model_digest);
}

// `pstwin run --van ucx`: one process per node, each told DMLC_PS_VAN_TYPE=ucx; the job token is on
// (pstwin run makes one), so every connection proved membership first.
TEST(UcxVan, PstwinRunWithTheUcxVanEndsWithTheSimulatorsModel) {
  SKIP_WITHOUT_UCX();
  const auto dir = testing::fresh_dir("ucx-run");
  const auto sim = testing::run_pstwin("sim scenarios/quickstart.toml -q --set workload.iterations=2 --out " +
                                       (dir / "sim").string());
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  testing::ChildProcess run({"run", "scenarios/quickstart.toml", "--van", "ucx", "--set",
                             "workload.iterations=2", "--out", (dir / "run").string()},
                            dir / "run.log");
  ASSERT_EQ(run.wait_until(Clock::now() + 90s), 0) << run.output();
  const auto results = testing::read_json(dir / "run" / "results.json");
  EXPECT_EQ(results["van"], "ucx");
  EXPECT_TRUE(results["completed"].get<bool>());
  EXPECT_EQ(results["invariants"]["violation_count"], 0);
  const std::string digest = testing::read_json(dir / "sim" / "results.json")["model_digest"];
  EXPECT_FALSE(digest.empty());
  EXPECT_EQ(results["model_digest"], digest);
  // Each node says which transports UCX gave it: shared memory between these processes of one host.
  std::ifstream log(dir / "run" / "parts" / "worker0.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("UCX 1."), std::string::npos) << text;
  const auto lanes = text.find("UCX to ");
  ASSERT_NE(lanes, std::string::npos) << text;
  EXPECT_NE(text.find("/memory", lanes), std::string::npos) << text;
}

// The crossed-line bug is in staging, not in the transport: over UCX as over TCP, legacy naming lets
// two workers of one host sum each other's bytes and per-rank naming does not.
TEST(UcxVan, CrossedLineLegacyNamingCrossesPerRankNamingIsClean) {
  SKIP_WITHOUT_UCX();
  const auto dir = testing::fresh_dir("ucx-crossed");
  const auto run = [&](const std::string& name, const std::vector<std::string>& sets) {
    std::vector<std::string> args{"run",   "scenarios/crossed_line.toml", "-q", "--van", "ucx",
                                  "--out", (dir / name).string()};
    for (const auto& set : sets) args.insert(args.end(), {"--set", set});
    testing::ChildProcess p(args, dir / (name + ".log"));
    const auto status = p.wait_until(Clock::now() + 90s);
    EXPECT_TRUE(status == 0 || status == 1) << p.output();
    return testing::read_json(dir / name / "results.json");
  };
  const auto clean = run("per-rank", {});
  EXPECT_TRUE(clean["completed"].get<bool>());
  EXPECT_EQ(clean["invariants"]["by_invariant"]["aggregates"]["checked"], 40);
  EXPECT_EQ(clean["invariants"]["violation_count"], 0);
  // Without jitter the workers copy in lock-step; real timing, so a clean run is tried again twice.
  std::uint64_t crossed = 0;
  for (int attempt = 0; attempt < 3 && crossed == 0; ++attempt) {
    const auto legacy =
        run("legacy" + std::to_string(attempt),
            {"staging.naming=legacy-key-only", "perturbation.compute_jitter=0ms", "workload.iterations=30"});
    EXPECT_TRUE(legacy["completed"].get<bool>());
    EXPECT_EQ(legacy["invariants"]["by_invariant"]["aggregates"]["checked"], 120);
    crossed = legacy["invariants"]["by_invariant"]["aggregates"]["violated"].get<std::uint64_t>();
  }
  EXPECT_GT(crossed, 0u) << "legacy-key-only staging crossed no aggregate in 3 runs of 30 iterations";
}

Message message_of(Command command, NodeId sender, NodeId recipient, std::string payload = "") {
  Message m;
  m.header.command = command;
  m.header.sender = sender;
  m.header.recipient = recipient;
  m.header.sequence = 1;
  if (!payload.empty())
    m.payload =
        Payload::copy_of(std::span(reinterpret_cast<const std::byte*>(payload.data()), payload.size()));
  return m;
}

std::span<const std::byte> bytes_of(const std::string& text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

// Sends `message` as a van's frame numbered `sequence`: eager, or by rendezvous.
void send_message(realnet::RawUcxClient& client, std::uint64_t sequence, const Message& message,
                  bool rendezvous = false) {
  const auto header = encode_header(message.header, message.payload, true);
  client.send_frame(sequence, header, message.payload.bytes(), rendezvous);
}

// Without a token the first well-formed message binds a connection to the node it names; what comes
// before it is refused and closes the connection, a member's forged, misrouted, corrupted or
// mis-sized message is dropped alone (eager or rendezvous), and the job ends with the simulator's model.
TEST(UcxVan, MalformedOversizedAndForgedMessagesAreRefusedAndTheJobGoesOn) {
  SKIP_WITHOUT_UCX();
  Scenario sc =
      load_scenario(PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml",
                    {{"workload.iterations", "20"}, {"workload.compute", "50ms"}, {"output.trace", "false"}});
  const auto simulated = sim::run_isolated({sc}, 1);
  ASSERT_TRUE(simulated[0].ok()) << problems(simulated[0]);
  auto options = over_ucx();
  options.job_token = "";
  options.on_started = [&](const std::vector<std::pair<std::string, std::string>>& nodes) {
    const std::string server = address_of(nodes, "server 0");
    const NodeId self = server_id(0);
    {
      // Garbage where the 72-byte header belongs, a header claiming 4 GiB, a header whose length
      // disagrees with what the message carries: each from a connection that never bound.
      realnet::RawUcxClient garbage(server);
      ASSERT_TRUE(garbage.welcome(5000).has_value());
      garbage.send_proof({});
      garbage.send(realnet::RawUcxClient::kFrame, bytes_of(std::string(20, 'x')), {});
    }
    for (const std::uint64_t claim : {std::uint64_t{4} << 30, std::uint64_t{2} << 20}) {
      realnet::RawUcxClient client(server);
      ASSERT_TRUE(client.welcome(5000).has_value());
      client.send_proof({});
      const Message m = message_of(Command::kPush, worker_id(1), self);
      client.send_frame(1, encode_header(m.header, Payload::phantom(claim), false),
                        bytes_of(std::string(16, 'x')));
    }
    // A member (bound to worker 1 by a heartbeat answer) forges worker 0, the scheduler and server 1,
    // sends a push with a wrong CRC by rendezvous and one out of its sequence window.
    realnet::RawUcxClient member(server);
    ASSERT_TRUE(member.welcome(5000).has_value());
    member.send_proof({});
    Message bind = message_of(Command::kHeartbeat, worker_id(1), self);
    bind.header.is_response = true;
    send_message(member, 1, bind);
    send_message(member, 2, message_of(Command::kPush, worker_id(0), self, std::string(64, 'f')));
    send_message(member, 3, message_of(Command::kShutdown, kSchedulerId, self));
    send_message(member, 4, message_of(Command::kPush, server_id(1), self, std::string(64, 'f')), true);
    Message corrupt = message_of(Command::kPush, worker_id(1), self, std::string(1 << 20, 'c'));
    auto header = encode_header(corrupt.header, corrupt.payload, true);
    header[kHeaderBytes - 1] ^= std::byte{1};  // the header's own CRC no longer matches
    member.send_frame(5, header, corrupt.payload.bytes(), true);
    std::this_thread::sleep_for(300ms);
  };
  const auto report = realnet::run_local(sc, options);
  EXPECT_TRUE(report.completed) << problems(report);
  EXPECT_EQ(report.violation_count, 0u) << problems(report);
  EXPECT_EQ(report.model_digest, simulated[0].model_digest);
  // The garbage header and the two mis-sized claims from connections that never bound; four from
  // node 11 (worker 1): three forgeries and the corrupted header.
  EXPECT_EQ(refused_from(report, "server 0", "127.0.0.1"), 3u) << refusals_text(report);
  EXPECT_EQ(refused_from(report, "server 0", "node " + std::to_string(worker_id(1))), 4u)
      << refusals_text(report);
}

// With a job token an outsider gets a challenge and nothing more: a message before the proof, a wrong
// proof and an unanswered challenge are each refused, the node table is never sent, and the job ends
// with the simulator's model.
TEST(UcxVan, OutsiderWithoutTheTokenIsRefused) {
  SKIP_WITHOUT_UCX();
  Scenario sc = load_scenario(
      PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml",
      {{"workload.iterations", "160"}, {"workload.compute", "50ms"}, {"output.trace", "false"}});
  const auto simulated = sim::run_isolated({sc}, 1);
  ASSERT_TRUE(simulated[0].ok()) << problems(simulated[0]);
  auto options = over_ucx();
  options.on_started = [&](const std::vector<std::pair<std::string, std::string>>& nodes) {
    const std::string scheduler = address_of(nodes, "scheduler");
    Message registration = message_of(Command::kRegister, kNoNode, kSchedulerId, "127.0.0.1:1");
    {
      realnet::RawUcxClient outsider(scheduler);
      const auto challenge = outsider.welcome(5000);
      ASSERT_TRUE(challenge.has_value());
      EXPECT_EQ(challenge->size(), realnet::kHandshakeBytes);
      send_message(outsider, 0, registration);
    }
    {
      realnet::RawUcxClient outsider(scheduler);
      const auto challenge = outsider.welcome(5000);
      ASSERT_TRUE(challenge.has_value());
      const auto proof = realnet::JobKey("another job's token, 32 bytes long").prove(bytes_of(*challenge));
      ASSERT_TRUE(proof.has_value());
      outsider.send_proof(*proof);
    }
    realnet::RawUcxClient unanswered(scheduler);
    EXPECT_TRUE(unanswered.welcome(5000).has_value());
    std::this_thread::sleep_for(6s);  // past the membership deadline
  };
  const auto report = realnet::run_local(sc, options);
  EXPECT_TRUE(report.completed) << problems(report);
  EXPECT_EQ(report.violation_count, 0u) << problems(report);
  EXPECT_EQ(report.model_digest, simulated[0].model_digest);
  // A message before the proof, a wrong proof, the unanswered challenge.
  EXPECT_GE(refused_from(report, "scheduler", "127.0.0.1"), 3u) << refusals_text(report);
  for (const auto& [node, peers] : report.refused)
    for (const auto& [peer, count] : peers)
      EXPECT_EQ(peer, "127.0.0.1") << node << " refused a member's message: " << refusals_text(report);
}

// UCX_TLS that leaves only shared memory cannot open a connection (UCX's connection manager needs a
// network transport): every node refuses to start, naming the variable and the fix, instead of
// waiting out its connect timeout.
TEST(UcxVan, UcxTlsWithoutANetworkTransportIsRefusedNamingIt) {
  SKIP_WITHOUT_UCX();
  const char* before = std::getenv("UCX_TLS");
  const std::optional<std::string> saved =
      before == nullptr ? std::nullopt : std::optional<std::string>(before);
  setenv("UCX_TLS", "posix,self", 1);
  const Scenario sc =
      load_scenario(PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml", {{"output.trace", "false"}});
  try {
    realnet::run_local(sc, over_ucx());
    ADD_FAILURE() << "a node started with UCX_TLS=posix,self";
  } catch (const realnet::BindError& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("UCX_TLS=\"posix,self\" leaves UCX no network transport"), std::string::npos) << text;
    EXPECT_NE(text.find("add tcp"), std::string::npos) << text;
  }
  if (saved)
    setenv("UCX_TLS", saved->c_str(), 1);
  else
    unsetenv("UCX_TLS");
}

TEST(UcxVan, SelectedByTheVanTypeOrTheRdmaSwitch) {
  SKIP_WITHOUT_UCX();
  std::map<std::string, std::string> env{{"DMLC_ROLE", "worker"},       {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                         {"DMLC_PS_ROOT_PORT", "1234"}, {"DMLC_NUM_WORKER", "1"},
                                         {"DMLC_NUM_SERVER", "1"},      {"DMLC_WORKER_ID", "0"}};
  env["DMLC_PS_VAN_TYPE"] = "ucx";
  EXPECT_EQ(realnet::parse_node_env(env).van, Van::kUcx);
  env.erase("DMLC_PS_VAN_TYPE");
  env["DMLC_ENABLE_RDMA"] = "1";
  EXPECT_EQ(realnet::parse_node_env(env).van, Van::kUcx);
  EXPECT_EQ(realnet::parse_van("ucx"), Van::kUcx);
  EXPECT_EQ(realnet::van_name(Van::kUcx), "ucx");
}

}  // namespace
}  // namespace pstwin
