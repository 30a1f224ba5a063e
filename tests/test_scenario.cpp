#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "scenario/resources.hpp"
#include "scenario/scenario.hpp"
#include "scenario/units.hpp"

namespace pstwin {
namespace {

using Overrides = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kFile = "scenarios/x.toml";

Scenario parse(std::string_view text, const Overrides& overrides = {}) {
  return parse_scenario(text, kFile, overrides);
}

// The message of the ScenarioError that parsing throws ("" if none is thrown).
std::string error_of(std::string_view text, const Overrides& overrides = {}) {
  try {
    parse(text, overrides);
  } catch (const ScenarioError& error) {
    return error.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(message, ...)                                                                    \
  do {                                                                                                    \
    const std::string error_text = (message);                                                             \
    ASSERT_FALSE(error_text.empty()) << "expected a ScenarioError";                                       \
    for (const std::string& part : std::initializer_list<std::string>{__VA_ARGS__}) {                     \
      EXPECT_NE(error_text.find(part), std::string::npos) << "\"" << part << "\" not in: " << error_text; \
    }                                                                                                     \
  } while (false)

std::string unquote(std::string text) {
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') return text.substr(1, text.size() - 2);
  return text;
}

// ------------------------------------------------------------------------------------------------
// Defaults

TEST(Scenario, EmptyFileGivesStructDefaults) {
  const Scenario s = parse("");
  const Scenario d;
  EXPECT_EQ(s.name, "unnamed");
  EXPECT_EQ(s.seed, 1u);
  EXPECT_EQ(s.cluster.topology, Topology::kStar);
  EXPECT_EQ(s.cluster.hosts, 0);
  EXPECT_EQ(s.cluster.host_bandwidth_Bps, 1.25e9);
  EXPECT_EQ(s.cluster.host_latency_s, 5e-6);
  EXPECT_EQ(s.cluster.host_speed_flops, 1e11);
  EXPECT_EQ(s.cluster.racks, d.cluster.racks);
  EXPECT_TRUE(s.cluster.host_links.empty());
  EXPECT_EQ(s.roles.servers, 1);
  EXPECT_EQ(s.roles.workers, 2);
  EXPECT_EQ(s.ps.mode, TrainingMode::kSync);
  EXPECT_EQ(s.ps.partition_bytes, 4096000u);
  EXPECT_EQ(s.ps.key_hash, KeyHash::kDjb2);
  EXPECT_EQ(s.ps.heartbeat_timeout_s, 10.0);
  EXPECT_EQ(s.workload.compute_s, 0.01);
  EXPECT_EQ(s.workload.iterations, 5);
  EXPECT_EQ(s.workload.payload, PayloadMode::kReal);
  EXPECT_EQ(s.staging.naming, StagingNaming::kPerRank);
  EXPECT_EQ(s.staging.job, "job0");
  EXPECT_EQ(s.network.model, "LV08");
  EXPECT_EQ(s.output.trace_max_events, 200000u);
  EXPECT_EQ(s.sim.max_time_s, 3600.0);
  EXPECT_EQ(s.sim.stack_size_kb, 128);
  EXPECT_EQ(s.source_path, kFile);
  EXPECT_TRUE(s.overrides.empty());
  // Neither tensor_bytes nor model_bytes: the default tensor list.
  const std::vector<std::uint64_t> expected{4000000, 1000000, 256000, 64000};
  EXPECT_EQ(s.workload.tensor_bytes, expected);
  EXPECT_EQ(s.declared_tensor_bytes(), expected);
  // A default Scenario resolves to the same text as a parsed empty file.
  Scenario code_default;
  code_default.workload.tensor_bytes = expected;
  EXPECT_EQ(resolved_toml(code_default), resolved_toml(s));
}

TEST(Scenario, EnumToString) {
  EXPECT_EQ(to_string(Topology::kStar), "star");
  EXPECT_EQ(to_string(Topology::kTwoTier), "two-tier");
  EXPECT_EQ(to_string(TrainingMode::kAsync), "async");
  EXPECT_EQ(to_string(KeyHash::kSdbm), "sdbm");
  EXPECT_EQ(to_string(KeyHash::kNaive), "naive");
  EXPECT_EQ(to_string(PayloadMode::kPhantom), "phantom");
  EXPECT_EQ(to_string(StagingNaming::kLegacyKeyOnly), "legacy-key-only");
}

TEST(Scenario, ReadsEnumsAndPlainFields) {
  const Scenario s = parse(R"(
name = "demo"
description = "a test"
seed = 42
[cluster]
topology = "two-tier"
hosts = 6
host_cores = 2
racks = 3
[roles]
servers = 2
workers = 3
[ps]
mode = "async"
key_hash = "sdbm"
server_engine_threads = 8
[workload]
payload = "phantom"
iterations = 9
[staging]
enabled = false
naming = "legacy-key-only"
job = "j7"
[network]
model = "CM02"
bandwidth_factor = 0.5
latency_factor = 2
tcp_gamma = 65536
[invariants]
aggregates = false
updates = false
sync_identical = false
bound_tolerance = 0.25
[output]
trace = false
trace_max_events = 17
[sim]
stack_size_kb = 64
)");
  EXPECT_EQ(s.name, "demo");
  EXPECT_EQ(s.description, "a test");
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.cluster.topology, Topology::kTwoTier);
  EXPECT_EQ(s.cluster.hosts, 6);
  EXPECT_EQ(s.cluster.host_cores, 2);
  EXPECT_EQ(s.cluster.racks, 3);
  EXPECT_EQ(s.roles.servers, 2);
  EXPECT_EQ(s.roles.workers, 3);
  EXPECT_EQ(s.ps.mode, TrainingMode::kAsync);
  EXPECT_EQ(s.ps.key_hash, KeyHash::kSdbm);
  EXPECT_EQ(s.ps.server_engine_threads, 8);
  EXPECT_EQ(s.workload.payload, PayloadMode::kPhantom);
  EXPECT_EQ(s.workload.iterations, 9);
  EXPECT_FALSE(s.staging.enabled);
  EXPECT_EQ(s.staging.naming, StagingNaming::kLegacyKeyOnly);
  EXPECT_EQ(s.staging.job, "j7");
  EXPECT_EQ(s.network.model, "CM02");
  EXPECT_EQ(s.network.bandwidth_factor, 0.5);
  EXPECT_EQ(s.network.latency_factor, 2.0);
  EXPECT_EQ(s.network.tcp_gamma, 65536.0);
  EXPECT_FALSE(s.invariants.aggregates);
  EXPECT_FALSE(s.invariants.updates);
  EXPECT_FALSE(s.invariants.sync_identical);
  EXPECT_EQ(s.invariants.bound_tolerance, 0.25);
  EXPECT_FALSE(s.output.trace);
  EXPECT_EQ(s.output.trace_max_events, 17u);
  EXPECT_EQ(s.sim.stack_size_kb, 64);
}

// ------------------------------------------------------------------------------------------------
// Units

std::uint64_t size_of(const std::string& value) {
  return parse("[ps]\npartition_bytes = " + value + "\n").ps.partition_bytes;
}
double bandwidth_of(const std::string& value) {
  return parse("[cluster]\nhost_bandwidth = " + value + "\n").cluster.host_bandwidth_Bps;
}
double duration_of(const std::string& value) {
  return parse("[workload]\ncompute = " + value + "\n").workload.compute_s;
}
double flops_of(const std::string& value) {
  return parse("[cluster]\nhost_speed = " + value + "\n").cluster.host_speed_flops;
}

TEST(Scenario, SizeUnits) {
  EXPECT_EQ(size_of("4096"), 4096u);
  EXPECT_EQ(size_of("\"512B\""), 512u);
  EXPECT_EQ(size_of("\"4KB\""), 4000u);
  EXPECT_EQ(size_of("\"4kB\""), 4000u);
  EXPECT_EQ(size_of("\"4MB\""), 4000000u);
  EXPECT_EQ(size_of("\"4GB\""), 4000000000u);
  EXPECT_EQ(size_of("\"4KiB\""), 4096u);
  EXPECT_EQ(size_of("\"4MiB\""), 4194304u);
  EXPECT_EQ(size_of("\"4GiB\""), 4294967296u);
  EXPECT_EQ(size_of("\"1.5KB\""), 1500u);
  EXPECT_EQ(size_of("\"1.5KiB\""), 1536u);
  EXPECT_EQ(size_of("\"4096\""), 4096u);  // a string without unit: bytes
  EXPECT_EQ(size_of("4e6"), 4000000u);    // a whole float
  EXPECT_EQ(units::parse_size("16TiB").value, std::uint64_t{16} << 40);
  EXPECT_EQ(units::parse_size("0.5B").status, units::ParseStatus::kNotWhole);
  EXPECT_EQ(units::parse_size("-4KB").status, units::ParseStatus::kNegative);
  EXPECT_EQ(units::parse_size("4XB").status, units::ParseStatus::kSyntax);
  EXPECT_EQ(units::parse_size("99999999999999999999B").status, units::ParseStatus::kOutOfRange);
  EXPECT_EQ(units::parse_size("1e30B").status, units::ParseStatus::kOutOfRange);
}

TEST(Scenario, BandwidthUnits) {
  EXPECT_EQ(bandwidth_of("\"10Gbps\""), 1.25e9);
  EXPECT_EQ(bandwidth_of("\"100Mbps\""), 12.5e6);
  EXPECT_EQ(bandwidth_of("\"1Kbps\""), 125.0);
  EXPECT_EQ(bandwidth_of("\"1bps\""), 0.125);
  EXPECT_EQ(bandwidth_of("\"1.25GBps\""), 1.25e9);
  EXPECT_EQ(bandwidth_of("\"125MBps\""), 1.25e8);
  EXPECT_EQ(bandwidth_of("\"1KBps\""), 1000.0);
  EXPECT_EQ(bandwidth_of("\"1Bps\""), 1.0);
  EXPECT_EQ(bandwidth_of("\"1GiBps\""), 1073741824.0);
  EXPECT_EQ(bandwidth_of("\"2MiBps\""), 2097152.0);
  EXPECT_EQ(bandwidth_of("5000000000"), 5e9);  // plain number: bytes per second
  EXPECT_EQ(bandwidth_of("2.5e9"), 2.5e9);
  EXPECT_EQ(bandwidth_of("\"0.1Gbps\""), 0.1e9 / 8);
}

TEST(Scenario, DurationUnits) {
  // Scaling happens on the decimal text, so the results equal the C++ literals exactly.
  EXPECT_EQ(duration_of("\"5us\""), 5e-6);
  EXPECT_EQ(duration_of("\"2ms\""), 2e-3);
  EXPECT_EQ(duration_of("\"1s\""), 1.0);
  EXPECT_EQ(duration_of("\"100ns\""), 100e-9);
  EXPECT_EQ(duration_of("\"1.5s\""), 1.5);
  EXPECT_EQ(duration_of("\"0.5ms\""), 0.5e-3);
  EXPECT_EQ(duration_of("\"0.1ms\""), 1e-4);
  EXPECT_EQ(duration_of("\"3 ms\""), 3e-3);
  EXPECT_EQ(duration_of("2"), 2.0);
  EXPECT_EQ(duration_of("0.25"), 0.25);
}

TEST(Scenario, FlopsUnits) {
  EXPECT_EQ(flops_of("\"100Gf\""), 1e11);
  EXPECT_EQ(flops_of("\"1.5Tf\""), 1.5e12);
  EXPECT_EQ(flops_of("\"5kf\""), 5e3);
  EXPECT_EQ(flops_of("\"5Mf\""), 5e6);
  EXPECT_EQ(flops_of("\"7f\""), 7.0);
  EXPECT_EQ(flops_of("1e9"), 1e9);
}

TEST(Scenario, UnitsAreWrittenAsHumanStrings) {
  using units::Quantity;
  EXPECT_EQ(units::format_real(Quantity::kBandwidth, 1.25e9), "\"10Gbps\"");
  EXPECT_EQ(units::format_real(Quantity::kBandwidth, 5e9), "\"5GBps\"");
  EXPECT_EQ(units::format_real(Quantity::kBandwidth, 1073741824.0), "\"1GiBps\"");
  EXPECT_EQ(units::format_real(Quantity::kBandwidth, 0.125), "\"1bps\"");
  EXPECT_EQ(units::format_real(Quantity::kDuration, 5e-6), "\"5us\"");
  EXPECT_EQ(units::format_real(Quantity::kDuration, 0.01), "\"10ms\"");
  EXPECT_EQ(units::format_real(Quantity::kDuration, 1.5), "\"1.5s\"");
  EXPECT_EQ(units::format_real(Quantity::kDuration, 100e-9), "\"100ns\"");
  EXPECT_EQ(units::format_real(Quantity::kDuration, 0), "0");
  EXPECT_EQ(units::format_real(Quantity::kFlops, 1e11), "\"100Gf\"");
  EXPECT_EQ(units::format_size(4000000), "\"4MB\"");
  EXPECT_EQ(units::format_size(4096000), "\"4096KB\"");
  EXPECT_EQ(units::format_size(65536), "\"64KiB\"");
  EXPECT_EQ(units::format_size(512), "\"512B\"");
  EXPECT_EQ(units::format_size(1536), "\"1536B\"");
  EXPECT_EQ(units::format_size(0), "0");
  EXPECT_EQ(units::format_size(123456789), "123456789");  // no short form: plain bytes
  EXPECT_EQ(units::format_size(std::numeric_limits<std::uint64_t>::max()), "\"18446744073709551615B\"");
  // No exact short form: a plain number that reads back exactly.
  EXPECT_EQ(units::format_real(Quantity::kDuration, 1e-30), "1e-30");
}

TEST(Scenario, FormattedQuantitiesReadBackExactly) {
  using units::Quantity;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-12, 13);
  for (const Quantity q : {Quantity::kBandwidth, Quantity::kDuration, Quantity::kFlops}) {
    for (int i = 0; i < 2000; ++i) {
      const double value = std::pow(10.0, exponent(rng));
      const std::string text = units::format_real(q, value);
      const auto back = units::parse_real(q, unquote(text));
      ASSERT_EQ(back.status, units::ParseStatus::kOk) << text;
      ASSERT_EQ(back.value, value) << text;
    }
  }
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t value = rng() >> (rng() % 64);
    const auto back = units::parse_size(unquote(units::format_size(value)));
    ASSERT_EQ(back.status, units::ParseStatus::kOk);
    ASSERT_EQ(back.value, value);
  }
}

// ------------------------------------------------------------------------------------------------
// Round trip

constexpr std::string_view kEverything = R"(
name = "everything \"quoted\""
description = "all fields away from their defaults,\ttabbed"
seed = 9223372036854775807
[cluster]
topology = "two-tier"
hosts = 8
host_bandwidth = "25Gbps"
host_latency = "1.5us"
host_speed = "2.5Tf"
host_cores = 16
racks = 4
rack_uplink_bandwidth = 123456789.123
rack_uplink_latency = "0.3ms"
[cluster.links.h3]
bandwidth = "1Gbps"
latency = "50us"
[cluster.links.h5]
latency = 0.1
[roles]
servers = 2
workers = 4
scheduler_host = "h7"
server_hosts = ["h1", "h2"]
worker_hosts = ["h3", "h4", "h5"]
[ps]
mode = "async"
partition_bytes = "1MiB"
key_hash = "naive"
server_engine_threads = 2
heartbeat_interval = "250ms"
heartbeat_timeout = "3s"
connect_timeout = 0.333333333333333314829616256247
[workload]
tensor_bytes = ["4KiB", 1000, "1.5MB"]
compute = "12.5ms"
iterations = 11
payload = "phantom"
sum_bandwidth = "7.5GBps"
[staging]
enabled = false
naming = "legacy-key-only"
copy_bandwidth = "3GiBps"
job = "jobX"
[perturbation]
delivery_jitter = "1us"
executor_jitter = "2us"
compute_jitter = "3ms"
start_jitter = 1e-7
[cpu]
send_per_message = "8us"
send_bandwidth = "3GBps"
receive_per_message = 1.5e-6
receive_bandwidth = 2.5e9
[network]
model = "SMPI"
bandwidth_factor = 0.97
latency_factor = 13.01
tcp_gamma = 4194304
[invariants]
aggregates = false
updates = false
sync_identical = false
bound_tolerance = 0.1
[output]
trace = false
trace_max_events = 12345
[sim]
max_time = "90s"
stack_size_kb = 256
[faults]
scheduler_start_delay = "15s"
)";

TEST(Scenario, RoundTripKeepsEveryField) {
  const Scenario first = parse(kEverything);
  const std::string text = resolved_toml(first);
  const Scenario second = parse_scenario(text, "resolved.toml");
  EXPECT_EQ(resolved_toml(second), text);
  EXPECT_EQ(resolved_toml(first), text);  // deterministic

  // Spot-check that the values survived, exactly.
  EXPECT_EQ(second.name, "everything \"quoted\"");
  EXPECT_EQ(second.description, "all fields away from their defaults,\ttabbed");
  EXPECT_EQ(second.seed, 9223372036854775807u);
  EXPECT_EQ(second.cluster.host_bandwidth_Bps, 25e9 / 8);
  EXPECT_EQ(second.cluster.host_latency_s, 1.5e-6);
  EXPECT_EQ(second.cluster.rack_uplink_bandwidth_Bps, 123456789.123);
  EXPECT_EQ(second.cluster.rack_uplink_latency_s, 0.3e-3);
  ASSERT_EQ(second.cluster.host_links.size(), 2u);
  EXPECT_EQ(second.cluster.host_links.at("h3").bandwidth_Bps, 1.25e8);
  EXPECT_EQ(second.cluster.host_links.at("h3").latency_s, 50e-6);
  EXPECT_EQ(second.cluster.host_links.at("h5").bandwidth_Bps, 25e9 / 8);  // the host default
  EXPECT_EQ(second.cluster.host_links.at("h5").latency_s, 0.1);
  EXPECT_EQ(second.roles.worker_hosts, (std::vector<std::string>{"h3", "h4", "h5"}));
  EXPECT_EQ(second.ps.partition_bytes, 1048576u);
  EXPECT_EQ(second.ps.connect_timeout_s, 1.0 / 3.0);
  EXPECT_EQ(second.workload.tensor_bytes, (std::vector<std::uint64_t>{4096, 1000, 1500000}));
  EXPECT_EQ(second.workload.compute_s, 12.5e-3);
  EXPECT_EQ(second.perturbation.start_jitter_s, 1e-7);
  EXPECT_EQ(second.cpu.send_per_message_s, 8e-6);
  EXPECT_EQ(second.cpu.send_bandwidth_Bps, 3e9);
  EXPECT_EQ(second.cpu.receive_per_message_s, 1.5e-6);
  EXPECT_EQ(second.cpu.receive_bandwidth_Bps, 2.5e9);
  EXPECT_EQ(second.network.bandwidth_factor, 0.97);
  EXPECT_EQ(second.network.latency_factor, 13.01);
  EXPECT_EQ(second.invariants.bound_tolerance, 0.1);
  EXPECT_EQ(second.faults.scheduler_start_delay_s, 15.0);

  // Every registered field appears in the resolved text, in registry (= struct) order.
  const std::vector<std::string> keys{"name = ",
                                      "seed = ",
                                      "[cluster]",
                                      "topology = ",
                                      "links = ",
                                      "[roles]",
                                      "worker_hosts =",
                                      "[ps]",
                                      "connect_timeout =",
                                      "[workload]",
                                      "sum_bandwidth =",
                                      "[staging]",
                                      "[perturbation]",
                                      "start_jitter =",
                                      "[cpu]",
                                      "receive_bandwidth =",
                                      "[network]",
                                      "tcp_gamma =",
                                      "[invariants]",
                                      "bound_tolerance =",
                                      "[output]",
                                      "[sim]",
                                      "stack_size_kb =",
                                      "[faults]",
                                      "scheduler_start_delay ="};
  std::size_t position = 0;
  for (const auto& key : keys) {
    const auto found = text.find(key, position);
    ASSERT_NE(found, std::string::npos) << key << " missing or out of order in:\n" << text;
    position = found;
  }
  EXPECT_NE(text.find("host_bandwidth = \"25Gbps\""), std::string::npos) << text;
  EXPECT_NE(text.find("tensor_bytes = [\"4KiB\", \"1KB\", \"1.5MB\"]"), std::string::npos) << text;
  EXPECT_NE(text.find("heartbeat_interval = \"250ms\""), std::string::npos) << text;
  // Values without a short exact unit form are written as plain numbers.
  EXPECT_NE(text.find("connect_timeout = 0.3333333333333333\n"), std::string::npos) << text;
  EXPECT_NE(text.find("rack_uplink_bandwidth = 123456789.123\n"), std::string::npos) << text;
}

TEST(Scenario, RoundTripOfModelBytesAndHugeSeed) {
  Scenario s = parse("[workload]\nmodel_bytes = \"102B\"\ntensors = 3\n");
  EXPECT_TRUE(s.workload.tensor_bytes.empty());
  EXPECT_EQ(s.declared_tensor_bytes(), (std::vector<std::uint64_t>{36, 32, 32}));  // 100 of 102 bytes
  s.seed = std::numeric_limits<std::uint64_t>::max();                              // beyond TOML integers
  s.network.tcp_gamma = 1e300;
  s.perturbation.delivery_jitter_s = 1e-30;
  const std::string text = resolved_toml(s);
  const Scenario back = parse_scenario(text, "resolved.toml");
  EXPECT_EQ(back.seed, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(back.network.tcp_gamma, 1e300);
  EXPECT_EQ(back.perturbation.delivery_jitter_s, 1e-30);
  EXPECT_EQ(back.workload.model_bytes, 102u);
  EXPECT_EQ(resolved_toml(back), text);
}

TEST(Scenario, ModelBytesSplitsIntoNearlyEqualTensors) {
  Scenario s;
  s.workload.model_bytes = 1000003;  // 250000 float32s and 3 spare bytes
  s.workload.tensors = 7;
  const auto sizes = s.declared_tensor_bytes();
  ASSERT_EQ(sizes.size(), 7u);
  std::uint64_t total = 0;
  for (const auto size : sizes) {
    EXPECT_EQ(size % 4, 0u);
    EXPECT_LE(sizes.front() - size, 4u);
    total += size;
  }
  EXPECT_EQ(total, 1000000u);
}

// ------------------------------------------------------------------------------------------------
// Overrides

TEST(Scenario, OverridesApplyInOrder) {
  const Overrides overrides{{"ps.mode", "async"},
                            {"staging.naming", "legacy-key-only"},  // not TOML: taken as a string
                            {"cluster.host_bandwidth", "40Gbps"},
                            {"roles.workers", "4"},
                            {"roles.workers", "6"},  // the later one wins
                            {"name", "123"},         // a string field takes the text as is
                            {"workload.compute", "\"3ms\""},
                            {"workload.tensor_bytes", "[4096, \"8KiB\"]"},
                            {"roles.server_hosts", "h1,h2"},  // comma-separated list
                            {"network.bandwidth_factor", "0.5"}};
  const Scenario s = parse("[ps]\nmode = \"sync\"\n[roles]\nworkers = 2\n", overrides);
  EXPECT_EQ(s.ps.mode, TrainingMode::kAsync);
  EXPECT_EQ(s.staging.naming, StagingNaming::kLegacyKeyOnly);
  EXPECT_EQ(s.cluster.host_bandwidth_Bps, 5e9);
  EXPECT_EQ(s.roles.workers, 6);
  EXPECT_EQ(s.name, "123");
  EXPECT_EQ(s.workload.compute_s, 3e-3);
  EXPECT_EQ(s.workload.tensor_bytes, (std::vector<std::uint64_t>{4096, 8192}));
  EXPECT_EQ(s.roles.server_hosts, (std::vector<std::string>{"h1", "h2"}));
  EXPECT_EQ(s.network.bandwidth_factor, 0.5);
  EXPECT_EQ(s.overrides, overrides);
}

TEST(Scenario, OverrideCreatesNestedLinkTable) {
  const Scenario s = parse("[cluster]\nhost_latency = \"7us\"\n",
                           {{"cluster.links.h3.bandwidth", "1Gbps"}, {"cluster.links.h2.latency", "1ms"}});
  ASSERT_EQ(s.cluster.host_links.size(), 2u);
  EXPECT_EQ(s.cluster.host_links.at("h3").bandwidth_Bps, 1.25e8);
  EXPECT_EQ(s.cluster.host_links.at("h3").latency_s, 7e-6);  // inherits cluster.host_latency
  EXPECT_EQ(s.cluster.host_links.at("h2").latency_s, 1e-3);
  EXPECT_EQ(s.cluster.host_links.at("h2").bandwidth_Bps, 1.25e9);

  // A whole link table at once.
  const Scenario w = parse("", {{"cluster.links.h1", "{ latency = \"3us\" }"}});
  EXPECT_EQ(w.cluster.host_links.at("h1").latency_s, 3e-6);
  EXPECT_ERROR_HAS(error_of("", {{"cluster.links.h1", "{ latncy = 1 }"}}),
                   "--set cluster.links.h1=", "did you mean \"cluster.links.h1.latency\"?");

  // On top of a link the file already has: the other key stays.
  const Scenario t = parse("[cluster.links.h1]\nbandwidth = \"2Gbps\"\nlatency = \"9us\"\n",
                           {{"cluster.links.h1.bandwidth", "4Gbps"}});
  EXPECT_EQ(t.cluster.host_links.at("h1").bandwidth_Bps, 5e8);
  EXPECT_EQ(t.cluster.host_links.at("h1").latency_s, 9e-6);
}

TEST(Scenario, OverrideErrors) {
  EXPECT_ERROR_HAS(error_of("", {{"ps.modee", "async"}}), "--set ps.modee=async: unknown field \"ps.modee\"",
                   "did you mean \"ps.mode\"?");
  EXPECT_ERROR_HAS(error_of("", {{"pss.mode", "async"}}), "--set pss.mode=async",
                   "did you mean \"ps.mode\"?");
  EXPECT_ERROR_HAS(error_of("", {{"workload", "3"}}), "--set workload=3: workload is a table, not a field",
                   "iterations");
  EXPECT_ERROR_HAS(error_of("", {{"cluster.links.h3.bandwith", "1Gbps"}}),
                   "did you mean \"cluster.links.h3.bandwidth\"?");
  EXPECT_ERROR_HAS(error_of("", {{"ps.mode", "syncc"}}), "--set ps.mode=syncc: ps.mode = \"syncc\"",
                   "unknown value; expected one of \"sync\", \"async\"");
  EXPECT_ERROR_HAS(error_of("", {{"roles.workers", "two"}}),
                   "--set roles.workers=two: roles.workers = \"two\"", "expected an integer");
  EXPECT_ERROR_HAS(error_of("", {{"workload.tensor_bytes", "4096,6"}}), "--set workload.tensor_bytes=4096,6",
                   "workload.tensor_bytes[1] = 6", "multiple of 4 bytes");
  // A value from the file that an override replaced is reported against the override.
  EXPECT_ERROR_HAS(
      error_of("[cluster]\nhost_bandwidth = \"1Gbps\"\n", {{"cluster.host_bandwidth", "10Gbsp"}}),
      "--set cluster.host_bandwidth=10Gbsp", "cannot read a bandwidth");
}

// ------------------------------------------------------------------------------------------------
// Errors: file, line, field, value and a fix

TEST(Scenario, UnknownEnumValueError) {
  EXPECT_EQ(error_of("name = \"x\"\n[ps]\nmode = \"syncc\"\n"),
            "scenarios/x.toml:3: ps.mode = \"syncc\": unknown value; expected one of \"sync\", \"async\"");
  EXPECT_ERROR_HAS(error_of("[cluster]\ntopology = \"ring\"\n"),
                   "scenarios/x.toml:2: cluster.topology = \"ring\"", "\"star\", \"two-tier\"");
  EXPECT_ERROR_HAS(error_of("[network]\nmodel = \"lv08\"\n"), "scenarios/x.toml:2: network.model = \"lv08\"",
                   "\"LV08\", \"CM02\", \"SMPI\"");
}

TEST(Scenario, UnknownFieldErrors) {
  EXPECT_EQ(
      error_of("[workload]\niterations = 3\niteration = 3\n"),
      "scenarios/x.toml:3: unknown field \"workload.iteration\"; did you mean \"workload.iterations\"?");
  // A unit suffix from the struct member name.
  EXPECT_ERROR_HAS(error_of("[cluster]\nhost_bandwidth_Bps = 5\n"),
                   "scenarios/x.toml:2:", "unknown field \"cluster.host_bandwidth_Bps\"",
                   "did you mean \"cluster.host_bandwidth\"?");
  // The right name in the wrong table.
  EXPECT_ERROR_HAS(error_of("[workload]\npartition_bytes = 4\n"), "did you mean \"ps.partition_bytes\"?");
  // A misspelt table.
  EXPECT_ERROR_HAS(error_of("\n[workloads]\niterations = 3\n"),
                   "scenarios/x.toml:2:", "unknown field \"workloads\"", "did you mean \"workload\"?");
  // Nothing close: list the table's fields.
  EXPECT_ERROR_HAS(error_of("[workload]\nfoo = 1\n"), "scenarios/x.toml:2: unknown field \"workload.foo\"",
                   "fields of [workload] are: tensor_bytes, model_bytes, tensors, compute, iterations");
  EXPECT_ERROR_HAS(error_of("bar = 1\n"), "unknown field \"bar\"", "top-level fields and tables are: name,");
  EXPECT_ERROR_HAS(error_of("[cluster.links.h1]\nbandwdth = \"1Gbps\"\n"),
                   "scenarios/x.toml:2:", "did you mean \"cluster.links.h1.bandwidth\"?");
  EXPECT_ERROR_HAS(error_of("[cluster.links.h1]\nzzz = 1\n"),
                   "fields of [cluster.links.h1] are: bandwidth, latency");
  EXPECT_ERROR_HAS(error_of("cluster = 5\n"), "scenarios/x.toml:1: cluster = 5: expected a table");
}

TEST(Scenario, UnitErrors) {
  EXPECT_EQ(error_of("[cluster]\nhosts = 3\nhost_bandwidth = \"10Gbsp\"\n"),
            "scenarios/x.toml:3: cluster.host_bandwidth = \"10Gbsp\": cannot read a bandwidth; write e.g. "
            "\"10Gbps\", \"1.25GBps\" or a number of bytes per second");
  EXPECT_ERROR_HAS(error_of("[cluster]\nhost_latency = \"5usec\"\n"),
                   "scenarios/x.toml:2:", "cluster.host_latency = \"5usec\"", "cannot read a duration",
                   "\"5us\"");
  EXPECT_ERROR_HAS(error_of("[cluster]\nhost_latency = \"-5us\"\n"), "cluster.host_latency = \"-5us\"",
                   "must not be negative");
  EXPECT_ERROR_HAS(error_of("[workload]\ncompute = -1\n"), "workload.compute = -1", "must not be negative");
  EXPECT_ERROR_HAS(error_of("[workload]\nmodel_bytes = \"4XB\"\ntensors = 1\n"),
                   "scenarios/x.toml:2:", "workload.model_bytes = \"4XB\"", "cannot read a size", "\"4MiB\"");
  EXPECT_ERROR_HAS(error_of("[ps]\npartition_bytes = \"0.5B\"\n"), "not a whole number of bytes");
  EXPECT_ERROR_HAS(error_of("[cluster]\nhost_speed = \"100Gflops\"\n"), "cluster.host_speed",
                   "cannot read a speed", "\"100Gf\"");
  EXPECT_ERROR_HAS(error_of("[cluster]\nhost_bandwidth = true\n"), "cluster.host_bandwidth = true",
                   "cannot read a bandwidth");
  EXPECT_ERROR_HAS(error_of("[sim]\nmax_time = nan\n"), "sim.max_time = nan", "cannot read a duration");
  // [cpu]: each field named with its value and what it takes.
  EXPECT_ERROR_HAS(error_of("[cpu]\nsend_per_message = \"8usec\"\n"),
                   "scenarios/x.toml:2:", "cpu.send_per_message = \"8usec\"", "cannot read a duration",
                   "\"5us\"");
  EXPECT_ERROR_HAS(error_of("[cpu]\nreceive_per_message = -1\n"), "cpu.receive_per_message = -1",
                   "must not be negative");
  EXPECT_ERROR_HAS(error_of("[cpu]\nsend_bandwidth = \"3GB\"\n"), "cpu.send_bandwidth = \"3GB\"",
                   "cannot read a bandwidth", "\"10Gbps\"");
  EXPECT_ERROR_HAS(error_of("", {{"cpu.receive_bandwidth", "fast"}}), "cpu.receive_bandwidth", "fast",
                   "cannot read a bandwidth");
  EXPECT_ERROR_HAS(error_of("[cpu]\nsend_per_mesage = \"8us\"\n"), "cpu.send_per_mesage",
                   "cpu.send_per_message");
  EXPECT_ERROR_HAS(error_of("[cpu]\nsend_per_message = \"8us\"\nshared_cores = -1\n"),
                   "cpu.shared_cores = -1", "must be at least 0");
  EXPECT_ERROR_HAS(error_of("[cpu]\nsend_per_message = \"8us\"\nshared_cores = 100000\n"),
                   "cpu.shared_cores = 100000", "at most 4096");
  EXPECT_ERROR_HAS(error_of("[cpu]\nsend_per_message = \"8us\"\nshared_cores = 2\ncore_scope = \"rack\"\n"),
                   "cpu.core_scope = \"rack\"", "\"host\", \"machine\"");
  EXPECT_ERROR_HAS(error_of("[cpu]\nshared_cores = 2\n"), "cpu.shared_cores = 2", "no cost is set",
                   "cpu.send_per_message", "pstwin calibrate");
  EXPECT_ERROR_HAS(error_of("[cpu]\nsend_per_message = \"8us\"\ncore_scope = \"machine\"\n"),
                   "cpu.core_scope = \"machine\"", "cpu.shared_cores", "remove cpu.core_scope");
  // The beyond-cache rates and cpu.cache_bytes come together.
  EXPECT_ERROR_HAS(
      error_of("[cpu]\nsend_bandwidth = \"4GBps\"\nreceive_bandwidth_beyond_cache = \"2GBps\"\n"),
      "cpu.receive_bandwidth_beyond_cache", "cpu.cache_bytes, which is 0", "\"512KB\"");
  EXPECT_ERROR_HAS(error_of("[cpu]\nsend_bandwidth = \"4GBps\"\ncache_bytes = \"1MB\"\n"), "cpu.cache_bytes",
                   "cpu.send_bandwidth_beyond_cache", "remove cpu.cache_bytes");
  EXPECT_ERROR_HAS(error_of("[cpu]\nwakeup = \"soon\"\n"), "cpu.wakeup = \"soon\"", "cannot read a duration");
}

// A message's bytes within cpu.cache_bytes go at the cached rate, the rest at the beyond-cache rate;
// the per-byte part of the receive is what the sender's stream books while it sends.
TEST(Scenario, CpuCostsSplitAMessageAtTheCacheSize) {
  const Scenario s = parse_scenario(
      "[cpu]\nsend_per_message = \"2us\"\nreceive_per_message = \"3us\"\nsend_bandwidth = \"4GBps\"\n"
      "receive_bandwidth = \"8GBps\"\ncache_bytes = 1000000\nsend_bandwidth_beyond_cache = \"2GBps\"\n"
      "receive_bandwidth_beyond_cache = \"1GBps\"\n",
      "cpu.toml");
  EXPECT_NEAR(s.cpu.send_cost(500'000), 2e-6 + 500'000 / 4e9, 1e-15);
  EXPECT_NEAR(s.cpu.send_cost(3'000'000), 2e-6 + 1e6 / 4e9 + 2e6 / 2e9, 1e-15);
  EXPECT_NEAR(s.cpu.receive_bytes_cost(3'000'000), 1e6 / 8e9 + 2e6 / 1e9, 1e-15);
  // Without the split every byte goes at the cached rate.
  const Scenario flat = parse_scenario("[cpu]\nsend_bandwidth = \"4GBps\"\n", "cpu.toml");
  EXPECT_NEAR(flat.cpu.send_cost(3'000'000), 3e6 / 4e9, 1e-15);
}

TEST(Scenario, WrongTypeErrors) {
  EXPECT_EQ(error_of("[roles]\nworkers = \"two\"\n"),
            "scenarios/x.toml:2: roles.workers = \"two\": expected an integer");
  EXPECT_ERROR_HAS(error_of("[roles]\nworkers = 2.5\n"), "roles.workers = 2.5", "expected an integer");
  EXPECT_ERROR_HAS(error_of("[staging]\nenabled = \"yes\"\n"), "staging.enabled = \"yes\"",
                   "expected true or false");
  EXPECT_ERROR_HAS(error_of("name = 3\n"), "scenarios/x.toml:1: name = 3", "expected a string");
  EXPECT_ERROR_HAS(error_of("[roles]\nworker_hosts = \"h1\"\n"), "roles.worker_hosts = \"h1\"",
                   "expected an array of host names");
  EXPECT_ERROR_HAS(error_of("[roles]\nworker_hosts = [\"h1\", 2]\n"), "roles.worker_hosts[1] = 2");
  EXPECT_ERROR_HAS(error_of("[workload]\ntensor_bytes = 4096\n"), "expected an array of sizes");
  EXPECT_ERROR_HAS(error_of("seed = -1\n"), "seed = -1", "must not be negative");
  EXPECT_ERROR_HAS(error_of("[network]\ntcp_gamma = \"big\"\n"), "network.tcp_gamma = \"big\"",
                   "expected a number");
}

TEST(Scenario, SyntaxErrorNamesFileLineAndColumn) {
  const std::string error = error_of("name = \"x\"\n[ps]\nmode = = 3\n");
  EXPECT_TRUE(error.starts_with("scenarios/x.toml:3:")) << error;
  EXPECT_NE(error.find(":3:8: "), std::string::npos) << error;
  EXPECT_GT(error.size(), std::string_view("scenarios/x.toml:3:8: ").size()) << "needs toml++'s description";
  EXPECT_ERROR_HAS(error_of("[ps]\n[ps]\n"), "scenarios/x.toml:2:");
}

TEST(Scenario, LoadScenarioReadsTheFile) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("pstwin_test_scenario_" + std::to_string(std::random_device{}()) + ".toml");
  {
    std::ofstream out(path);
    out << "name = \"from file\"\n[roles]\nworkers = 3\nservers = 0\n";
  }
  const std::string error = [&] {
    try {
      load_scenario(path.string());
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_ERROR_HAS(error, path.string() + ":4: roles.servers = 0", "must be at least 1");
  {
    std::ofstream out(path);
    out << "name = \"from file\"\n[roles]\nworkers = 3\n";
  }
  const Scenario s = load_scenario(path.string(), {{"roles.servers", "2"}});
  EXPECT_EQ(s.name, "from file");
  EXPECT_EQ(s.roles.workers, 3);
  EXPECT_EQ(s.roles.servers, 2);
  EXPECT_EQ(s.source_path, path.string());
  std::filesystem::remove(path);
  EXPECT_THROW(load_scenario(path.string()), ScenarioError);
}

// ------------------------------------------------------------------------------------------------
// Validation

TEST(Scenario, RangeValidation) {
  EXPECT_ERROR_HAS(error_of("[roles]\nservers = 0\n"), "scenarios/x.toml:2: roles.servers = 0", "at least 1");
  EXPECT_ERROR_HAS(error_of("[roles]\nworkers = 0\n"), "scenarios/x.toml:2: roles.workers = 0", "at least 1");
  EXPECT_ERROR_HAS(error_of("[workload]\niterations = 0\n"), "workload.iterations = 0", "at least 1");
  EXPECT_ERROR_HAS(error_of("[ps]\nserver_engine_threads = 0\n"), "ps.server_engine_threads = 0",
                   "at least 1");
  EXPECT_ERROR_HAS(error_of("[ps]\npartition_bytes = 2\n"), "ps.partition_bytes = 2", "at least 4 bytes");
  EXPECT_ERROR_HAS(error_of("[ps]\npartition_bytes = 4097\n"), "ps.partition_bytes = 4097", "multiple of 4",
                   "e.g. \"4KiB\"");
  EXPECT_ERROR_HAS(error_of("[workload]\ntensor_bytes = [4096, 6]\n"), "workload.tensor_bytes[1] = 6",
                   "positive multiple of 4 bytes");
  EXPECT_ERROR_HAS(error_of("[workload]\ntensor_bytes = [0]\n"), "workload.tensor_bytes[0] = 0",
                   "positive multiple of 4 bytes");
  EXPECT_ERROR_HAS(error_of("[cluster]\nhost_bandwidth = 0\n"), "cluster.host_bandwidth = 0",
                   "greater than 0");
  EXPECT_ERROR_HAS(error_of("[staging]\ncopy_bandwidth = \"0Gbps\"\n"), "staging.copy_bandwidth",
                   "greater than 0");
  EXPECT_ERROR_HAS(error_of("[cluster.links.h1]\nbandwidth = 0\n"), "cluster.links.h1.bandwidth = 0",
                   "greater than 0");
  EXPECT_ERROR_HAS(error_of("[network]\nbandwidth_factor = -0.5\n"), "network.bandwidth_factor = -0.5",
                   "at least 0");
  EXPECT_ERROR_HAS(error_of("[network]\nlatency_factor = -1\n"), "network.latency_factor = -1", "at least 0");
}

TEST(Scenario, CrossFieldValidation) {
  EXPECT_ERROR_HAS(error_of("[ps]\nheartbeat_interval = \"2s\"\nheartbeat_timeout = \"2s\"\n"),
                   "scenarios/x.toml:3: ps.heartbeat_timeout = \"2s\"",
                   "must be greater than ps.heartbeat_interval = \"2s\"", "raise ps.heartbeat_timeout");
  // The default interval (1s) against a timeout from the file.
  EXPECT_ERROR_HAS(error_of("[ps]\nheartbeat_timeout = \"500ms\"\n"), "ps.heartbeat_interval = \"1s\"");
  EXPECT_ERROR_HAS(error_of("[cluster]\ntopology = \"two-tier\"\nracks = 0\n"),
                   "scenarios/x.toml:3: cluster.racks = 0", "\"two-tier\" needs at least 1 rack");
  EXPECT_NO_THROW(parse("[cluster]\nracks = 0\n"));  // racks only matter for two-tier
  EXPECT_ERROR_HAS(error_of("[cluster]\ntopology = \"two-tier\"\nracks = 2\nswitch_bandwidth = \"1GBps\"\n"),
                   "cluster.switch_bandwidth", "only applies to topology \"star\"");

  // Tensors: exactly one of tensor_bytes and model_bytes + tensors.
  EXPECT_ERROR_HAS(error_of("[workload]\ntensor_bytes = [4096]\nmodel_bytes = \"1MB\"\ntensors = 2\n"),
                   "scenarios/x.toml:3: workload.model_bytes = \"1MB\"", "keep one of them");
  EXPECT_ERROR_HAS(error_of("[workload]\nmodel_bytes = \"1MB\"\n"), "workload.model_bytes = \"1MB\"",
                   "needs workload.tensors >= 1");
  EXPECT_ERROR_HAS(error_of("[workload]\ntensors = 3\n"), "scenarios/x.toml:2: workload.tensors = 3",
                   "needs workload.model_bytes");
  EXPECT_ERROR_HAS(error_of("[workload]\ntensor_bytes = [4096]\ntensors = 3\n"), "workload.tensors = 3",
                   "only applies with workload.model_bytes");
  EXPECT_ERROR_HAS(error_of("[workload]\nmodel_bytes = 8\ntensors = 3\n"), "workload.model_bytes = 8",
                   "too small", "at least 12");
  EXPECT_ERROR_HAS(error_of("[workload]\nlayerwise = true\nforward_share = 1\n"),
                   "workload.forward_share = 1", "between 0 and 1");
  EXPECT_NO_THROW(parse("[workload]\nforward_share = 1\n"));  // only read in layerwise mode
  const Scenario s = parse("[workload]\nmodel_bytes = \"1MB\"\ntensors = 4\n");
  EXPECT_EQ(s.declared_tensor_bytes(), (std::vector<std::uint64_t>(4, 250000)));

  // Hosts must exist: h0..h{N-1}.
  EXPECT_ERROR_HAS(error_of("[cluster]\nhosts = 4\n[roles]\nworker_hosts = [\"h1\", \"h4\"]\n"),
                   "scenarios/x.toml:4: roles.worker_hosts = [\"h1\", \"h4\"]", "host \"h4\" does not exist",
                   "hosts are h0..h3 (cluster.hosts = 4)");
  EXPECT_ERROR_HAS(error_of("[roles]\nserver_hosts = [\"node1\"]\n"), "roles.server_hosts",
                   "host \"node1\" does not exist", "hosts are h0..h3");
  EXPECT_ERROR_HAS(error_of("[roles]\nscheduler_host = \"h01\"\n"), "roles.scheduler_host = \"h01\"",
                   "does not exist");
  EXPECT_ERROR_HAS(error_of("[cluster.links.h9]\nlatency = \"1us\"\n"),
                   "scenarios/x.toml:1: cluster.links.h9", "host \"h9\" does not exist");
  EXPECT_ERROR_HAS(error_of("", {{"roles.worker_hosts", "h9"}}), "--set roles.worker_hosts=h9",
                   "host \"h9\" does not exist");
  EXPECT_NO_THROW(
      parse("[cluster]\nhosts = 2\n[roles]\nscheduler_host = \"h1\"\nworker_hosts = [\"h0\", \"h1\"]\n"));
}

// ------------------------------------------------------------------------------------------------
// Placement

TEST(Scenario, DefaultPlacementOneHostPerNode) {
  const Scenario s = parse("[roles]\nservers = 2\nworkers = 3\n");
  EXPECT_EQ(s.host_count(), 6);
  EXPECT_EQ(s.host_name(4), "h4");
  EXPECT_EQ(s.scheduler_host_name(), "h0");
  EXPECT_EQ(s.server_host_name(0), "h1");
  EXPECT_EQ(s.server_host_name(1), "h2");
  EXPECT_EQ(s.worker_host_name(0), "h3");
  EXPECT_EQ(s.worker_host_name(2), "h5");
}

TEST(Scenario, DefaultPlacementWrapsOnFewHosts) {
  const Scenario s = parse("[cluster]\nhosts = 3\n[roles]\nservers = 2\nworkers = 3\n");
  EXPECT_EQ(s.host_count(), 3);
  EXPECT_EQ(s.server_host_name(0), "h1");
  EXPECT_EQ(s.server_host_name(1), "h2");
  EXPECT_EQ(s.worker_host_name(0), "h0");  // (1 + 2 + 0) % 3
  EXPECT_EQ(s.worker_host_name(1), "h1");
  EXPECT_EQ(s.worker_host_name(2), "h2");
}

TEST(Scenario, ListedPlacement) {
  const Scenario s = parse(
      "[cluster]\nhosts = 4\n[roles]\nservers = 3\nworkers = 5\nscheduler_host = \"h3\"\n"
      "server_hosts = [\"h2\"]\nworker_hosts = [\"h0\", \"h1\"]\n");
  EXPECT_EQ(s.scheduler_host_name(), "h3");
  EXPECT_EQ(s.server_host_name(0), "h2");
  EXPECT_EQ(s.server_host_name(2), "h2");
  EXPECT_EQ(s.worker_host_name(0), "h0");
  EXPECT_EQ(s.worker_host_name(1), "h1");
  EXPECT_EQ(s.worker_host_name(4), "h0");
}

// ------------------------------------------------------------------------------------------------
// Docs and shipped scenarios

#ifdef PSTWIN_SOURCE_DIR
// docs/SCENARIOS.md embeds the generated field reference. Set PSTWIN_UPDATE_DOCS=1 to rewrite it.
TEST(Scenario, DocsMatchTheRegistry) {
  const std::filesystem::path path = std::filesystem::path(PSTWIN_SOURCE_DIR) / "docs" / "SCENARIOS.md";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string doc = buffer.str();
  const std::string begin = "<!-- BEGIN FIELD REFERENCE (generated: scenario_reference_markdown()) -->\n";
  const std::string end = "<!-- END FIELD REFERENCE -->";
  const auto b = doc.find(begin);
  const auto e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  const std::string embedded = doc.substr(b + begin.size(), e - b - begin.size());
  const std::string generated = "\n" + scenario_reference_markdown() + "\n";
  if (embedded != generated && std::getenv("PSTWIN_UPDATE_DOCS") != nullptr) {
    doc.replace(b + begin.size(), e - b - begin.size(), generated);
    std::ofstream(path) << doc;
    return;
  }
  EXPECT_EQ(embedded, generated)
      << "docs/SCENARIOS.md is out of date: run this test with PSTWIN_UPDATE_DOCS=1";
}

TEST(Scenario, ShippedScenariosLoadAndRoundTrip) {
  const std::filesystem::path dir = std::filesystem::path(PSTWIN_SOURCE_DIR) / "scenarios";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no scenarios directory";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    Scenario s;
    ASSERT_NO_THROW(s = load_scenario(entry.path().string()));
    const std::string text = resolved_toml(s);
    EXPECT_EQ(resolved_toml(parse_scenario(text, "resolved.toml")), text);
  }
}

// Every shipped scenario fits on a small machine with room to spare: the estimate is not what stops it.
TEST(Scenario, ShippedScenariosFitTheResourceEstimate) {
  const std::filesystem::path dir = std::filesystem::path(PSTWIN_SOURCE_DIR) / "scenarios";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    const Scenario s = load_scenario(entry.path().string());
    const ResourceEstimate estimate = estimate_resources(s);
    EXPECT_LT(estimate.memory_bytes, 2e9);
    EXPECT_LT(estimate.messages, 1e8);
    EXPECT_FALSE(check_resources(s, {.memory_bytes = 4e9}));
  }
}
#endif

// What cannot fit is refused at validation, naming the field, its value and the estimate, and fast:
// nothing sized by the scenario is built first (a model split into 2^31 tensors is not listed).
TEST(Scenario, WhatCannotFitIsRefusedNamingTheFieldAndTheEstimate) {
  const std::string base = "[workload]\niterations = 2\n";
  const std::vector<std::pair<Overrides, std::string>> cases{
      {{{"roles.workers", "10000000"}}, "roles.workers = 10000000: a run would need about "},
      {{{"cluster.hosts", "1000000000"}}, "cluster.hosts = 1000000000: a run would need about "},
      {{{"workload.tensor_bytes", "[\"10GB\"]"}},
       "workload.tensor_bytes = [\"10GB\"]: a run would need about "},
      {{{"workload.model_bytes", "1000000000000000"}, {"workload.tensors", "2000000000"}},
       "workload.model_bytes = 1000000000000000: a run would need about "},
      {{{"sim.stack_size_kb", "1000000000"}}, "sim.stack_size_kb = 1000000000: at most 1048576"},
      {{{"ps.server_engine_threads", "1000000000"}},
       "ps.server_engine_threads = 1000000000: a run would need"},
      {{{"cluster.topology", "two-tier"}, {"cluster.racks", "2000000000"}},
       "cluster.racks = 2000000000: a run would need about "},
      {{{"workload.payload", "phantom"}, {"workload.iterations", "2000000000"}},
       "workload.iterations = 2000000000: a run would simulate about "},
  };
  for (const auto& [overrides, expected] : cases) {
    SCOPED_TRACE(expected);
    const auto start = std::chrono::steady_clock::now();
    const std::string error = error_of(base, overrides);
    EXPECT_NE(error.find(expected), std::string::npos) << error;
    // A hang guard, not a speed target: building what these ask for takes hours or all memory.
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0);
  }
  // The message says how much and of what, and what to lower.
  const std::string workers = error_of(base, {{"roles.workers", "10000000"}});
  EXPECT_NE(workers.find("more than this machine's"), std::string::npos) << workers;
  EXPECT_NE(workers.find("a 5.3 MB model held 30000003 times"), std::string::npos) << workers;
  EXPECT_NE(workers.find("lower roles.workers"), std::string::npos) << workers;
}

TEST(Scenario, ResourceEstimateCountsNodesModelCopiesAndMessages) {
  Scenario s = parse(
      "[roles]\nworkers = 4\nservers = 2\n[workload]\ntensor_bytes = [\"4MB\"]\n"
      "iterations = 5\n[ps]\npartition_bytes = \"1MB\"\n");
  const ResourceEstimate estimate = estimate_resources(s);
  // 4 partitions of one 4 MB tensor, 4 messages each per worker and iteration.
  EXPECT_DOUBLE_EQ(estimate.messages, 5.0 * 4 * 4 * 4);
  // Real payloads: the model held 3 times per worker and 3 times on the servers.
  const auto payload = std::ranges::find_if(estimate.memory, [](const ResourceTerm& t) {
    return t.detail.find("model held") != std::string::npos;
  });
  ASSERT_NE(payload, estimate.memory.end());
  EXPECT_DOUBLE_EQ(payload->amount, 4e6 * (3 * 4 + 3));
  EXPECT_EQ(payload->field, "workload.tensor_bytes");
  // Phantom payloads hold no model bytes.
  s.workload.payload = PayloadMode::kPhantom;
  EXPECT_LT(estimate_resources(s).memory_bytes, estimate.memory_bytes - 4e6 * 15 + 1);
  // A limit below the estimate refuses it, naming the largest term's field.
  const auto problem = check_resources(s, {.memory_bytes = 1000});
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->problem.find("more than this machine's 1.0 KB"), std::string::npos) << problem->problem;
}

// The name becomes pstwin-out/<name>: one path component, printable, and printed escaped.
TEST(Scenario, NameMustBeASafePathComponent) {
  for (const std::string bad : {"../../x", "a/b", "..", ".", "", "red\x1b[31m", "tab\tname", "back\\slash"}) {
    SCOPED_TRACE(bad);
    const std::string error = error_of("", {{"name", bad}});
    EXPECT_NE(error.find(": name = "), std::string::npos) << error;
    EXPECT_EQ(error.find('\x1b'), std::string::npos) << "a raw escape reached the message";
  }
  EXPECT_NE(error_of("", {{"name", "red\x1b[31m"}}).find("name = \"red\\u001b[31m\""), std::string::npos);
  EXPECT_NE(error_of("", {{"name", std::string(200, 'n')}}).find("is longer than 128 bytes"),
            std::string::npos);
  EXPECT_EQ(parse("name = \"lb_4w4s.v2-run_1\"").name, "lb_4w4s.v2-run_1");
}

// Found by the scenario fuzz target: a --set value that is not UTF-8 was taken and written to
// resolved.toml, which then could not be loaded (tests/fuzz/corpus/scenario/crash-set-name-not-utf8).
TEST(Scenario, OverrideTextMustBeUtf8) {
  for (const std::string bad : {"6J#--\xbc st}]", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"}) {
    const std::string error = error_of("", {{"name", bad}});
    EXPECT_NE(error.find(": not valid UTF-8"), std::string::npos) << error;
    EXPECT_EQ(error.rfind("--set name=", 0), 0u) << error;
  }
  EXPECT_NE(error_of("", {{"workload.tensor_bytes", "[\"4MB\xff\"]"}}).find("not valid UTF-8"),
            std::string::npos);
  // Valid UTF-8 names load and survive the round trip.
  const Scenario s = parse("", {{"name", "r\xc3\xa9sum\xc3\xa9-\xe2\x82\xac-\xf0\x9f\x9a\x80"}});
  EXPECT_EQ(resolved_toml(parse_scenario(resolved_toml(s), "resolved.toml")), resolved_toml(s));
}

// Devices, pipes and huge files are refused before they are read: /dev/zero would never end.
TEST(Scenario, OnlyARegularFileOfModestSizeIsRead) {
  const auto start = std::chrono::steady_clock::now();
  for (const std::string path : {"/dev/zero", "/dev/null", "/proc/self"}) {
    SCOPED_TRACE(path);
    try {
      load_scenario(path);
      ADD_FAILURE() << "loaded";
    } catch (const ScenarioError& e) {
      EXPECT_NE(std::string(e.what()).find(path + ": not a regular file"), std::string::npos) << e.what();
    }
  }
  const auto big =
      std::filesystem::temp_directory_path() / ("pstwin-big-" + std::to_string(getpid()) + ".toml");
  std::ofstream{big}.close();
  std::filesystem::resize_file(big, std::uintmax_t{1} << 30);  // sparse: 1 GiB on no disk
  try {
    load_scenario(big.string());
    ADD_FAILURE() << "loaded";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("1073741824 bytes, larger than 16 MiB"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(big);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
}

}  // namespace
}  // namespace pstwin
