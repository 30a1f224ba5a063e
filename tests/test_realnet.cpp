// The real-network backend over loopback TCP: the quickstart scenario completes with its invariants
// checked, agrees with the simulator on the final model, runs in async mode, and survives
// malformed frames.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/codec.hpp"
#include "realnet/local_run.hpp"
#include "realnet/zmq_runtime.hpp"
#include "scenario/scenario.hpp"
#include "sim/simulation.hpp"

namespace pstwin {
namespace {

Scenario quickstart(std::vector<std::pair<std::string, std::string>> overrides = {}) {
  overrides.emplace_back("workload.iterations", "3");
  return load_scenario(PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml", overrides);
}

std::string violations_text(const RunReport& report) {
  std::string out = report.failure;
  for (const auto& v : report.violations) out += "\n" + v.invariant + ": " + v.detail;
  return out;
}

TEST(RealNet, QuickstartCompletesOverLoopback) {
  const auto report = realnet::run_local(quickstart());
  EXPECT_EQ(report.backend, "real");
  EXPECT_TRUE(report.completed) << violations_text(report);
  EXPECT_EQ(report.violation_count, 0u) << violations_text(report);
  EXPECT_GT(report.invariants_checked, 0u);
  EXPECT_EQ(report.iterations.size(), 3u);
  EXPECT_GT(report.messages, 0u);
  EXPECT_FALSE(report.model_digest.empty());
  EXPECT_FALSE(report.replay.empty());
}

TEST(RealNet, SameModelDigestAsTheSimulator) {
  const auto scenario = quickstart();
  // run_isolated forks: do it before this test starts any thread.
  const auto simulated = sim::run_isolated({scenario}, 1);
  ASSERT_EQ(simulated.size(), 1u);
  ASSERT_TRUE(simulated[0].ok()) << violations_text(simulated[0]);
  const auto real = realnet::run_local(scenario);
  ASSERT_TRUE(real.ok()) << violations_text(real);
  EXPECT_FALSE(real.model_digest.empty());
  EXPECT_EQ(real.model_digest, simulated[0].model_digest);
}

TEST(RealNet, AsyncModeCompletes) {
  const auto report = realnet::run_local(quickstart({{"ps.mode", "async"}}));
  EXPECT_TRUE(report.completed) << violations_text(report);
  EXPECT_EQ(report.violation_count, 0u) << violations_text(report);
  EXPECT_GT(report.invariants_checked, 0u);
}

TEST(RealNet, MalformedFramesAreRejectedAndTheRunGoesOn) {
  std::mutex mutex;
  std::vector<std::string> logs;
  realnet::LocalRunOptions options;
  options.van = realnet::Van::kZmq;  // ZeroMQ frames (the epoll van's: Adversary.*)
  options.job_token =
      "";  // unauthenticated: the frames reach the decoder (with a token, the handshake refuses them)
  options.log = [&](std::string_view line) {
    std::lock_guard lock(mutex);
    logs.emplace_back(line);
  };
  auto rejections = [&] {
    std::lock_guard lock(mutex);
    return std::ranges::count_if(
        logs, [](const std::string& line) { return line.find("rejected a frame") != std::string::npos; });
  };
  options.on_started = [&](const std::vector<std::pair<std::string, std::string>>& nodes) {
    ASSERT_GE(nodes.size(), 2u);
    Message message;
    message.header.command = Command::kPush;
    message.header.recipient = 0;
    const std::string body(16, 'x');
    message.payload = Payload::copy_of(std::as_bytes(std::span(body)));
    const auto header = encode_header(message.header, message.payload);
    const std::string good_header(reinterpret_cast<const char*>(header.data()), header.size());
    std::string bad_magic = good_header;
    bad_magic[0] = 'X';
    std::string corrupt_body = body;
    corrupt_body[3] = 'y';
    for (const auto& [label, address] : {nodes[0], nodes[1]}) {
      realnet::send_raw(address, {"garbage"});                    // header: too short
      realnet::send_raw(address, {good_header, body.substr(5)});  // payload_length: truncated
      realnet::send_raw(address, {good_header, corrupt_body});    // payload_crc: corrupted
      realnet::send_raw(address, {bad_magic, body});              // magic
    }
    // While the job runs: a job that ended first would leave the frames unread, not rejected.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (rejections() < 8 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  // Long enough that the frames are read before the job ends, on an idle machine too.
  const auto report = realnet::run_local(
      load_scenario(PSTWIN_SOURCE_DIR "/scenarios/quickstart.toml", {{"workload.iterations", "60"}}),
      options);
  EXPECT_TRUE(report.completed) << violations_text(report);
  EXPECT_EQ(report.violation_count, 0u) << violations_text(report);

  std::lock_guard lock(mutex);
  std::string all;
  for (const auto& line : logs) all += line + "\n";
  int rejected = 0;
  bool header = false, length = false, crc = false;
  for (const auto& line : logs) {
    if (line.find("rejected a frame") == std::string::npos) continue;
    ++rejected;
    header |= line.find("header: frame has 7 bytes") != std::string::npos;
    length |= line.find("payload_length:") != std::string::npos;
    crc |= line.find("payload_crc:") != std::string::npos;
  }
  EXPECT_EQ(rejected, 8) << all;
  EXPECT_TRUE(header && length && crc) << all;
}

}  // namespace
}  // namespace pstwin
