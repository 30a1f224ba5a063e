// ps.balancing = "lb" needs no tuning: partition size, scheduling credit and fused push/pull chosen
// from the cluster's links where the scenario leaves them out (src/scenario/lb_tuning.*), kept where
// it sets them, reported in results.json; a generated scenario with defaults near its bound in SimGrid.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

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

TEST(LbTuning, PartitionsCreditAndFusedFollowTheLinks) {
  const Scenario s = parse(kHetero);
  ASSERT_TRUE(s.lb_chosen);
  // The slowest server's share, M 2.5 / 27.5, in 100 partitions: 363,636 B, down to 4 KiB steps.
  EXPECT_EQ(s.ps.partition_bytes, 88u * 4096);
  // Round trip 2 x (5 + 5) us at 10 Gb/s: 25 KB, under one partition: 2 + 1 in flight per server.
  EXPECT_EQ(s.ps.scheduling_credit, 3);
  EXPECT_EQ(s.ps.push_pull, PushPullMode::kFused);
  const LbChoice expected{.partition_bytes = 88u * 4096,
                          .scheduling_credit = 3,
                          .fused = true,
                          .chose_partition_bytes = true,
                          .chose_scheduling_credit = true,
                          .chose_push_pull = true};
  EXPECT_EQ(*s.lb_chosen, expected);

  // Equal servers: M / (100 S). 4 servers at 10 Gb/s, 400 MB: 1,000,000 B, 244 x 4 KiB; the 40 MB
  // tensors in 40 equal pieces: 1,000,000 B up to 4 KiB.
  EXPECT_EQ(parse(equal_links()).ps.partition_bytes, 245u * 4096);
  // A small model: the per-message floor, 100 us of the fastest link (10 Gb/s: 125,000 B, 30 x 4 KiB),
  // wins; the 200 KB tensors then go in two equal pieces rather than 122,880 B and a remainder.
  EXPECT_EQ(parse(kHetero, {{"workload.model_bytes", "2MB"}}).ps.partition_bytes, 25u * 4096);
  // A small model on 8 servers at 40 Gb/s: 500 KB partitions would leave servers out of the probe;
  // 4 partitions per server instead (5 MB / 32 = 156,250 B, 38 x 4 KiB). Its 500 KB tensors in round 3
  // pieces would leave 30 partitions for 8 servers: in ceil 4 equal ones (125,000 B up to 4 KiB).
  EXPECT_EQ(
      parse(equal_links(),
            {{"cluster.host_bandwidth", "40Gbps"}, {"roles.servers", "8"}, {"workload.model_bytes", "5MB"}})
          .ps.partition_bytes,
      31u * 4096);
  // A large model on one server: capped at BytePS's 4,096,000, and its 50 MB tensors then in 13 equal
  // pieces (3,846,154 B up to 4 KiB).
  EXPECT_EQ(parse(kHetero, {{"roles.servers", "1"}, {"workload.model_bytes", "500MB"}}).ps.partition_bytes,
            940u * 4096);
  // Long links: 50 us each at 40 Gb/s, a 200 us round trip carries 1 MB; partitions of 100 us (500 KB,
  // 122 x 4 KiB), the 2 MB tensors in 4 equal pieces (123 x 4 KiB): 2 + ceil(1e6 / 503,808) = 4.
  const Scenario far = parse(equal_links(), {{"cluster.host_bandwidth", "40Gbps"},
                                             {"cluster.host_latency", "50us"},
                                             {"workload.model_bytes", "20MB"}});
  EXPECT_EQ(far.ps.partition_bytes, 123u * 4096);
  EXPECT_EQ(far.ps.scheduling_credit, 4);
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
  // Hash balancing: BytePS's defaults, nothing chosen.
  const Scenario hash = parse(kHetero, {{"ps.balancing", "hash"}});
  EXPECT_FALSE(hash.lb_chosen);
  EXPECT_EQ(hash.ps.partition_bytes, 4096000u);
  EXPECT_EQ(hash.ps.scheduling_credit, 4);
  EXPECT_EQ(hash.ps.push_pull, PushPullMode::kSeparate);
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
  const auto dir = fresh_dir("lb-tuning-generated");
  const auto path = dir / "scenario.toml";
  std::ofstream(path) << kGenerated;
  const auto run = run_pstwin("sim " + path.string() + " -q --out " + dir.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto r = read_json(dir / "results.json");
  EXPECT_EQ(r["invariants"]["violation_count"], 0) << r["invariants"];
  const double bound = r["bound"]["time_s"], achieved = r["bound"]["achieved_s"];
  EXPECT_GE(achieved, bound) << "a lower bound was beaten: the bound or the model is wrong";
  EXPECT_LE(achieved, 1.10 * bound);
  // What the run used is what the rule gives, and results.json says so.
  const Scenario s = parse(kGenerated);
  const auto& chosen = r["lb"]["chosen"];
  EXPECT_EQ(chosen["partition_bytes"].get<std::uint64_t>(), s.ps.partition_bytes);
  EXPECT_EQ(chosen["scheduling_credit"].get<int>(), s.ps.scheduling_credit);
  EXPECT_TRUE(chosen["fused"].get<bool>());
  EXPECT_EQ(chosen["chosen_fields"].size(), 3u);
  // With BytePS's defaults instead the same job is far from its bound.
  const auto pinned_dir = fresh_dir("lb-tuning-generated-pinned");
  const auto pinned = run_pstwin("sim " + path.string() + " -q --out " + pinned_dir.string() +
                                 " --set ps.partition_bytes=4096000 --set ps.scheduling_credit=4 "
                                 "--set ps.push_pull=separate");
  ASSERT_EQ(pinned.exit_code, 0) << pinned.output;
  const auto p = read_json(pinned_dir / "results.json");
  EXPECT_GT(p["bound"]["achieved_s"].get<double>(), 1.2 * bound);
  EXPECT_EQ(p["lb"]["chosen"]["chosen_fields"].size(), 0u);
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

TEST(LbTuning, TensorsGoInEqualPiecesNotAPartitionAndARemainder) {
  // 100 us of the 10 Gb/s links is 125,000 B, 120 KiB in steps: each 137,500 B tensor would go as
  // 122,880 + 14,620 B, 64 messages a worker; one piece per tensor instead (34 x 4 KiB), 32 messages.
  EXPECT_EQ(parse(kSmallTensors).ps.partition_bytes, 34u * 4096);
  // In SimGrid every message pays its route's latency (100 us here) in turn on its connection, as long
  // as a 137.5 KB message takes on a 5 Gb/s worker's two connections: whole tensors run the job
  // markedly faster than tensors cut at 120 KiB. (Where a NIC's bytes dominate, the two tie.)
  const auto dir = fresh_dir("lb-tuning-equal-pieces");
  const auto path = dir / "scenario.toml";
  std::ofstream(path) << kSmallTensors;
  const auto run = run_pstwin("sim " + path.string() + " -q --out " + dir.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto cut_dir = fresh_dir("lb-tuning-equal-pieces-cut");
  const auto cut = run_pstwin("sim " + path.string() + " -q --out " + cut_dir.string() +
                              " --set ps.partition_bytes=122880");
  ASSERT_EQ(cut.exit_code, 0) << cut.output;
  const auto whole = read_json(dir / "results.json"), pieces = read_json(cut_dir / "results.json");
  EXPECT_EQ(whole["invariants"]["violation_count"], 0);
  EXPECT_EQ(pieces["invariants"]["violation_count"], 0);
  const double whole_s = whole["bound"]["achieved_s"], pieces_s = pieces["bound"]["achieved_s"];
  EXPECT_GE(whole_s, whole["bound"]["time_s"].get<double>());
  EXPECT_LT(whole_s, 0.92 * pieces_s);
}

}  // namespace
}  // namespace pstwin
