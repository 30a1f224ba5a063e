// ps.balancing = "lb" needs no tuning: partition size, scheduling credit and fused push/pull chosen
// from the cluster's links where the scenario leaves them out (src/scenario/lb_tuning.*), kept where
// it sets them, reported in results.json; a generated scenario with defaults near its bound in SimGrid.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "ps/role_options.hpp"
#include "scenario/lb_tuning.hpp"
#include "scenario/scenario.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::fresh_dir;
using testing::read_json;
using testing::run_pstwin;

// 8 workers, servers at 10/10/5/2.5 Gb/s (lb_hetero's cluster), 5 us links, a 400 MB model.
constexpr std::string_view kHetero = R"(
[cluster]
host_bandwidth = "10Gbps"
host_latency = "5us"
links = { h3 = { bandwidth = "5Gbps" }, h4 = { bandwidth = "2.5Gbps" } }
[roles]
servers = 4
workers = 8
[ps]
balancing = "lb"
[workload]
model_bytes = "400MB"
tensors = 10
payload = "phantom"
)";

// kHetero with every NIC at cluster.host_bandwidth.
std::string equal_links() {
  std::string text(kHetero);
  const auto line = text.find("links = ");
  return text.erase(line, text.find('\n', line) + 1 - line);
}

Scenario parse(std::string_view text, const std::vector<std::pair<std::string, std::string>>& sets = {}) {
  return parse_scenario(text, "lb_tuning.toml", sets);
}

// `pstwin sim` of `text` (as scenario.toml in a fresh directory `name`) with `sets` ("--set F=V ..."):
// its results.json, checked to have completed without invariant violations.
nlohmann::json simulate(const std::string& name, std::string_view text, const std::string& sets = "") {
  const auto dir = fresh_dir(name);
  const auto path = dir / "scenario.toml";
  std::ofstream(path) << text;
  const auto run = run_pstwin("sim " + path.string() + " -q --out " + dir.string() + " " + sets);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  auto r = read_json(dir / "results.json");
  EXPECT_EQ(r["invariants"]["violation_count"], 0) << r["invariants"];
  return r;
}

// A run's balanced mean over its bound, checked not to beat the bound.
double over_bound(const nlohmann::json& r) {
  const double bound = r["bound"]["time_s"], achieved = r["bound"]["achieved_s"];
  EXPECT_GE(achieved, bound) << "a lower bound was beaten: the bound or the model is wrong";
  return achieved / bound;
}

TEST(LbTuning, PartitionsCreditAndFusedFollowTheLinks) {
  const Scenario s = parse(kHetero);
  ASSERT_TRUE(s.lb_chosen);
  // The slowest server's share, M 2.5 / 27.5, in 100 partitions: 363,636 B, down to 4 KiB steps.
  EXPECT_EQ(s.ps.partition_bytes, 88u * 4096);
  // Round trip 2 x (5 + 5) us at 10 Gb/s: 25 KB, under one partition: 2 + 1 in flight per server.
  EXPECT_EQ(s.ps.scheduling_credit, 3);
  EXPECT_EQ(s.ps.push_pull, PushPullMode::kFused);
  // The simulator's transport as the vans have it: a pool slot for each of the 13 other nodes, the
  // flow model (it takes the pool's pacing and the receivers' shaping), pipelined messages.
  EXPECT_EQ(s.sim.send_pool_slots, 13);
  EXPECT_EQ(s.sim.network_model, "flow");
  EXPECT_TRUE(s.sim.pipeline_messages);
  const LbChoice expected{.partition_bytes = 88u * 4096,
                          .scheduling_credit = 3,
                          .fused = true,
                          .chose_partition_bytes = true,
                          .chose_scheduling_credit = true,
                          .chose_push_pull = true,
                          .send_pool_slots = 13,
                          .network_model = "flow",
                          .pipeline_messages = true,
                          .chose_send_pool_slots = true,
                          .chose_network_model = true,
                          .chose_pipeline_messages = true};
  EXPECT_EQ(*s.lb_chosen, expected);
  // Set, they are kept; SMPI's size-dependent factors keep SimGrid's own solver.
  const Scenario set = parse(kHetero, {{"sim.network_model", "simgrid"}, {"sim.pipeline_messages", "false"}});
  EXPECT_EQ(set.sim.network_model, "simgrid");
  EXPECT_FALSE(set.sim.pipeline_messages);
  EXPECT_FALSE(set.lb_chosen->chose_network_model);
  EXPECT_TRUE(set.lb_chosen->chose_send_pool_slots);
  EXPECT_EQ(parse(kHetero, {{"network.model", "SMPI"}}).sim.network_model, "simgrid");

  // Equal servers: M / (100 S). 4 servers at 10 Gb/s, 400 MB: 1,000,000 B, 244 x 4 KiB; the 40 MB
  // tensors in 40 equal pieces: 1,000,000 B up to 4 KiB.
  EXPECT_EQ(parse(equal_links()).ps.partition_bytes, 245u * 4096);
  // A small model: the per-message floor, 20 us of the fastest link (10 Gb/s: 25,000 B, 6 x 4 KiB to
  // the nearest step), wins; the 200 KB tensors' 8 equal pieces would round up to 28,672 B, more than
  // an eighth above it, so 24,576 B and a remainder.
  EXPECT_EQ(parse(kHetero, {{"workload.model_bytes", "2MB"}}).ps.partition_bytes, 6u * 4096);
  // A small model on 8 servers at 40 Gb/s: 100 KB partitions (20 us) would leave servers out of the
  // probe; 4 partitions per server instead (2 MB / 32 = 62,500 B, 15 x 4 KiB). Its 200 KB tensors in
  // round 3 pieces would leave 30 partitions for 8 servers: in ceil 4 equal ones (50,000 B up to 4 KiB).
  EXPECT_EQ(
      parse(equal_links(),
            {{"cluster.host_bandwidth", "40Gbps"}, {"roles.servers", "8"}, {"workload.model_bytes", "2MB"}})
          .ps.partition_bytes,
      13u * 4096);
  // A large model on one server: capped at BytePS's 4,096,000, and its 50 MB tensors then in 13 equal
  // pieces (3,846,154 B up to 4 KiB).
  EXPECT_EQ(parse(kHetero, {{"roles.servers", "1"}, {"workload.model_bytes", "500MB"}}).ps.partition_bytes,
            940u * 4096);
  // Long links: 50 us each at 40 Gb/s, a 200 us round trip carries 1 MB; partitions of 20 us (100 KB,
  // 24 x 4 KiB), the 2 MB tensors in 20 equal pieces (25 x 4 KiB): 2 + ceil(1e6 / 102,400) = 12.
  const Scenario far = parse(equal_links(), {{"cluster.host_bandwidth", "40Gbps"},
                                             {"cluster.host_latency", "50us"},
                                             {"workload.model_bytes", "20MB"}});
  EXPECT_EQ(far.ps.partition_bytes, 25u * 4096);
  EXPECT_EQ(far.ps.scheduling_credit, 12);
}

TEST(LbTuning, FieldsTheScenarioSetsAreKept) {
  // In the file and by --set alike; the credit then follows the partitions the scenario chose.
  std::string text(kHetero);
  text.replace(text.find("balancing = \"lb\""), 16, "balancing = \"lb\"\npush_pull = \"separate\"");
  const Scenario s = parse(text, {{"ps.partition_bytes", "8KB"}});
  EXPECT_EQ(s.ps.partition_bytes, 8000u);
  EXPECT_EQ(s.ps.push_pull, PushPullMode::kSeparate);
  EXPECT_EQ(s.ps.scheduling_credit, 2 + 4);  // 25 KB in flight: ceil(25000 / 8000) = 4
  ASSERT_TRUE(s.lb_chosen);
  EXPECT_FALSE(s.lb_chosen->chose_partition_bytes);
  EXPECT_FALSE(s.lb_chosen->chose_push_pull);
  EXPECT_TRUE(s.lb_chosen->chose_scheduling_credit);
  EXPECT_FALSE(s.lb_chosen->fused);
  // Set to the default's own value: still the scenario's.
  EXPECT_EQ(parse(kHetero, {{"ps.scheduling_credit", "4"}}).ps.scheduling_credit, 4);
  // With validators the pull stays separate (they judge before the aggregate goes out).
  Scenario plain = parse(kHetero);
  plain.roles.validators = 1;
  EXPECT_FALSE(lb_tuning(plain).fused);
  // Hash balancing: BytePS's partition and credit, nothing chosen; push_pull is pstwin's default.
  const Scenario hash = parse(kHetero, {{"ps.balancing", "hash"}});
  EXPECT_FALSE(hash.lb_chosen);
  EXPECT_EQ(hash.ps.partition_bytes, 4096000u);
  EXPECT_EQ(hash.ps.scheduling_credit, 4);
  EXPECT_EQ(hash.ps.push_pull, PushPullMode::kFused);
}

TEST(LbTuning, ResolvedScenarioKeepsTheChoiceAndTheJob) {
  // Nodes may load the resolved TOML (every field set): the same values, the same job digest.
  const Scenario s = parse(kHetero);
  const Scenario back = parse_scenario(resolved_toml(s), "resolved.toml");
  EXPECT_EQ(back.ps.partition_bytes, s.ps.partition_bytes);
  EXPECT_EQ(back.ps.scheduling_credit, s.ps.scheduling_credit);
  EXPECT_EQ(back.ps.push_pull, s.ps.push_pull);
  EXPECT_EQ(job_digest(back), job_digest(s));
  ASSERT_TRUE(back.lb_chosen);
  EXPECT_FALSE(back.lb_chosen->chose_partition_bytes);
}

// One scenario of `bench/lb_family.py --seed 1` (its index 12): two servers at 5 and 1.25 Gb/s, 50 us
// links, every ps field but balancing at its default.
constexpr std::string_view kGenerated = R"(
name = "lb_family_1_12"
seed = 1
[cluster]
topology = "star"
host_bandwidth = "5000Mbps"
host_latency = "50us"
[cluster.links.h2]
bandwidth = "1250Mbps"
[roles]
servers = 2
workers = 5
[ps]
mode = "sync"
balancing = "lb"
[workload]
model_bytes = "84.6MB"
tensors = 36
compute = "0s"
iterations = 5
payload = "phantom"
[output]
trace = false
)";

TEST(LbTuning, GeneratedScenarioWithDefaultsWithinTenPercentOfItsBound) {
  const auto r = simulate("lb-tuning-generated", kGenerated);
  EXPECT_LE(over_bound(r), 1.10);
  // What the run used is what the rule gives, and results.json says so.
  const Scenario s = parse(kGenerated);
  const auto& chosen = r["lb"]["chosen"];
  EXPECT_EQ(chosen["partition_bytes"].get<std::uint64_t>(), s.ps.partition_bytes);
  EXPECT_EQ(chosen["scheduling_credit"].get<int>(), s.ps.scheduling_credit);
  EXPECT_TRUE(chosen["fused"].get<bool>());
  EXPECT_EQ(chosen["send_pool_slots"].get<int>(), 8);
  EXPECT_EQ(chosen["network_model"].get<std::string>(), "flow");
  EXPECT_TRUE(chosen["pipeline_messages"].get<bool>());
  EXPECT_EQ(chosen["chosen_fields"].size(), 6u);
  // With BytePS's defaults instead the same job is far from its bound.
  const auto p =
      simulate("lb-tuning-generated-pinned", kGenerated,
               "--set ps.partition_bytes=4096000 --set ps.scheduling_credit=4 --set ps.push_pull=separate");
  EXPECT_GT(p["bound"]["achieved_s"].get<double>(), 1.2 * r["bound"]["time_s"].get<double>());
  EXPECT_EQ(p["lb"]["chosen"]["chosen_fields"].size(), 3u);  // the simulator's transport only
}

// `bench/lb_family.py --seed 1`'s index 0: 3 workers (two at 5 Gb/s) and 2 servers at 10 Gb/s, 50 us
// links, 32 tensors of 137.5 KB.
constexpr std::string_view kSmallTensors = R"(
[workload]
model_bytes = "4.4MB"
tensors = 32
compute = "0s"
iterations = 5
payload = "phantom"
[roles]
workers = 3
servers = 2
[ps]
balancing = "lb"
[cluster]
host_latency = "50us"
host_bandwidth = "10Gbps"
links = { h3 = { bandwidth = "5Gbps" }, h5 = { bandwidth = "5Gbps" } }
[output]
trace = false
)";

TEST(LbTuning, TensorsGoInEqualPiecesAndMessagesFollowEachOtherOnAConnection) {
  // 20 us of the 10 Gb/s links is 25,000 B, 24,576 B to the nearest 4 KiB: each 137,500 B tensor in
  // round(137,500 / 24,576) = 6 equal pieces (22,917 B, up to the same 6 x 4 KiB).
  EXPECT_EQ(parse(kSmallTensors).ps.partition_bytes, 6u * 4096);
  // 50 us links: a message's route latency (100 us) is more than the wire time of a 24 KB partition on a
  // 5 Gb/s worker's connection. Pipelined as on a TCP stream (the bytes of a connection's next message
  // follow this one's, the latency is paid once per burst) the job runs within 3 % of its bound; with
  // each message waiting its latency in turn, more than 1.5 times as long.
  const auto piped = simulate("lb-tuning-pipelined", kSmallTensors);
  const auto in_turn = simulate("lb-tuning-in-turn", kSmallTensors, "--set sim.pipeline_messages=false");
  EXPECT_LE(over_bound(piped), 1.03);
  EXPECT_GT(over_bound(in_turn), 1.5 * over_bound(piped));
}

// `bench/lb_family.py --seed 1`'s index 7: 17 workers at 0.625-2.5 Gb/s, one server (h1) at 2.5 Gb/s.
constexpr std::string_view kMixedWorkers = R"(
[output]
trace = false
[workload]
payload = "phantom"
iterations = 5
model_bytes = "4.8MB"
tensors = 33
compute = "0s"
[cluster]
host_bandwidth = "2500Mbps"
host_latency = "10us"
[cluster.links.h1]
bandwidth = "2500Mbps"
[cluster.links.h2]
bandwidth = "1250Mbps"
[cluster.links.h3]
bandwidth = "1250Mbps"
[cluster.links.h4]
bandwidth = "625Mbps"
[cluster.links.h5]
bandwidth = "625Mbps"
[cluster.links.h6]
bandwidth = "2500Mbps"
[cluster.links.h7]
bandwidth = "625Mbps"
[cluster.links.h8]
bandwidth = "1250Mbps"
[cluster.links.h9]
bandwidth = "1250Mbps"
[cluster.links.h10]
bandwidth = "1250Mbps"
[cluster.links.h11]
bandwidth = "1250Mbps"
[cluster.links.h12]
bandwidth = "1250Mbps"
[cluster.links.h13]
bandwidth = "2500Mbps"
[cluster.links.h14]
bandwidth = "625Mbps"
[cluster.links.h15]
bandwidth = "625Mbps"
[cluster.links.h16]
bandwidth = "625Mbps"
[cluster.links.h17]
bandwidth = "625Mbps"
[cluster.links.h18]
bandwidth = "1250Mbps"
[roles]
servers = 1
workers = 17
[ps]
balancing = "lb"
)";

TEST(LbTuning, AServerHoldsEveryWorkerToAnEqualShare) {
  // The link's sharing (LV08: by route penalty, which a slower NIC on the route raises) gives the slow
  // workers' pushes less of the server's downlink than the fast ones'; every key waits for its
  // slowest push, so the fast ones idle on their credit while the link is not full. Held to an equal
  // share each (lb.server_equal_shares, the default), the job runs within 3 % of its bound; without,
  // more than 15 % above it.
  EXPECT_TRUE(server_options(parse(kMixedWorkers)).equal_shares);
  EXPECT_FALSE(server_options(parse(kMixedWorkers, {{"lb.server_equal_shares", "false"}})).equal_shares);
  // Equal workers: the link's shares come out equal anyway; held, they could not catch up after a stall.
  EXPECT_FALSE(server_options(parse(kHetero)).equal_shares);
  const auto held = simulate("lb-tuning-equal-shares", kMixedWorkers);
  const auto free = simulate("lb-tuning-free-shares", kMixedWorkers, "--set lb.server_equal_shares=false");
  EXPECT_LE(over_bound(held), 1.03);
  EXPECT_GT(over_bound(free), 1.15);
}

}  // namespace
}  // namespace pstwin
