// trace.json where a race is visible: copy, push and aggregate spans say what they worked on, flows
// join a worker's copy to the server's aggregation of it, violations are marked, lanes are named by
// role, and dropped events are never silent.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/run_report.hpp"
#include "sim_support.hpp"

namespace pstwin {
namespace {

using testing::fresh_dir;
using testing::read_json;
using testing::run_pstwin;

struct Span {
  std::string name, category, lane, process;
  int pid = 0;
  int tid = 0;
  double start = 0, end = 0;
  nlohmann::json args;
};

struct Trace {
  std::vector<Span> spans;
  std::vector<nlohmann::json> markers;                         // instant events
  std::map<std::uint64_t, std::vector<nlohmann::json>> flows;  // by id, in file order
  std::set<std::string> lanes;
  nlohmann::json other;
};

Trace load_trace(const std::filesystem::path& path) {
  const auto doc = read_json(path);
  Trace trace;
  std::map<std::pair<int, int>, std::string> lanes;
  std::map<int, std::string> processes;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"]] = e["args"]["name"];
  }
  for (const auto& [where, name] : lanes) trace.lanes.insert(name);
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X") {
      const int pid = e["pid"], tid = e["tid"];
      const double ts = e["ts"], dur = e["dur"];
      trace.spans.push_back({e["name"], e["cat"], lanes[{pid, tid}], processes[pid], pid, tid, ts, ts + dur,
                             e.value("args", nlohmann::json::object())});
    } else if (ph == "i") {
      trace.markers.push_back(e);
    } else if (ph == "s" || ph == "t" || ph == "f") {
      trace.flows[e["id"].get<std::uint64_t>()].push_back(e);
    }
  }
  trace.other = doc["otherData"];
  return trace;
}

bool tagged(const Span& s, std::uint64_t key, std::uint32_t iteration) {
  return s.args.contains("key") && s.args["key"] == key && s.args["iteration"] == iteration;
}

// The crossed-line race, replayed: one worker copies into the buffer the other's push is still
// reading; the trace shows both copies on that buffer inside the push, the flow from each copy to the
// server's aggregation and the violation the server saw.
TEST(Trace, ReplayedCrossedLineShowsTheRaceFlowsAndTheViolation) {
  const auto dir = fresh_dir("trace-crossed");
  const auto r = run_pstwin(
      "sim scenarios/crossed_line.toml --seed 0 --set staging.naming=legacy-key-only --out " + dir.string());
  ASSERT_EQ(r.exit_code, 1) << r.output;
  const Trace trace = load_trace(dir / "trace.json");

  // The first violation's marker, on the server's process, with the detail results.json has.
  const auto results = read_json(dir / "results.json");
  const auto& first = results["invariants"]["violations"][0];
  ASSERT_EQ(first["invariant"], "aggregates");
  ASSERT_TRUE(first.contains("time_s")) << first.dump();
  std::smatch m;
  const std::string detail = first["detail"];
  ASSERT_TRUE(std::regex_search(detail, m, std::regex(R"(key (\d+), iteration (\d+))"))) << detail;
  const std::uint64_t key = std::stoull(m[1]);
  const auto iteration = static_cast<std::uint32_t>(std::stoul(m[2]));
  const nlohmann::json* marker = nullptr;
  for (const auto& e : trace.markers)
    if (e["args"]["detail"] == detail) marker = &e;
  ASSERT_NE(marker, nullptr) << "no violation marker for: " << detail;
  EXPECT_EQ((*marker)["name"], "violation: aggregates");
  EXPECT_EQ((*marker)["s"], "p");
  EXPECT_DOUBLE_EQ((*marker)["ts"].get<double>(), first["time_s"].get<double>() * 1e6);

  // Both workers' copies of that key and iteration, into one buffer (named by key only).
  std::map<int, const Span*> copies;  // by worker
  for (const auto& s : trace.spans)
    if (s.category == "copy" && tagged(s, key, iteration)) copies[s.args["worker"]] = &s;
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0]->args["buffer"], copies[1]->args["buffer"]);
  EXPECT_NE(copies[0]->args["buffer"].get<std::string>().find(std::to_string(key)), std::string::npos);

  // One worker's push of the key, from the credit to its acknowledgement (the buffer is in use all
  // along), has its send inside, and the other worker's copy into the buffer overlaps it.
  bool race_seen = false;
  for (const auto& push : trace.spans) {
    if (push.category != "push" || push.name != "push" || !tagged(push, key, iteration)) continue;
    EXPECT_GT(push.end, push.start) << "a push span of no duration";
    const int worker = push.args["worker"];
    EXPECT_EQ(push.args["buffer"], copies[worker]->args["buffer"]);
    const Span* other = copies[1 - worker];
    bool has_send = false;
    for (const auto& send : trace.spans)
      if (send.category == "send" && send.name == "push" && send.pid == push.pid &&
          tagged(send, key, iteration))
        has_send = has_send || (send.start >= push.start && send.end <= push.end);
    EXPECT_TRUE(has_send) << "worker " << worker << "'s push holds no send of it";
    if (other->start < push.end && other->end > push.start) race_seen = true;
  }
  EXPECT_TRUE(race_seen) << "no worker's copy overlapped the other's push of key " << key;

  // Each worker's flow: its copy first, the server's aggregation last.
  const int server_pid = (*marker)["pid"];
  for (const auto& [worker, copy] : copies) {
    bool joined = false;
    for (const auto& [id, points] : trace.flows) {
      if (points.front()["ph"] != "s" || points.front()["pid"] != copy->pid ||
          points.front()["ts"].get<double>() != copy->start)
        continue;
      EXPECT_EQ(points.back()["ph"], "f");
      joined = points.back()["pid"] == server_pid && points.size() >= 3;
    }
    EXPECT_TRUE(joined) << "worker " << worker << "'s copy is not joined to the server's aggregate";
  }
  // Aggregate spans say whose push they summed.
  std::set<int> summed;
  for (const auto& s : trace.spans)
    if (s.category == "engine" && s.name == "aggregate" && tagged(s, key, iteration))
      summed.insert(s.args["worker"].get<int>());
  EXPECT_EQ(summed, (std::set<int>{0, 1}));

  // Lanes are named by role, as processes are.
  EXPECT_TRUE(trace.lanes.contains("send->server 0")) << "lanes: " << nlohmann::json(trace.lanes).dump();
  EXPECT_TRUE(trace.lanes.contains("recv<-worker 1")) << nlohmann::json(trace.lanes).dump();
  // The scheduler's answers to registrations, before the nodes had ids.
  EXPECT_TRUE(trace.lanes.contains("send->registrant 0")) << nlohmann::json(trace.lanes).dump();
  for (const auto& lane : trace.lanes)
    EXPECT_FALSE(std::regex_match(lane, std::regex(R"((send->|recv<-)\d+)"))) << lane;
}

TEST(Trace, DroppedEventsAreReportedInTheTraceAndTheSummary) {
  const auto dir = fresh_dir("trace-dropped");
  const auto r =
      run_pstwin("sim scenarios/quickstart.toml --set output.trace_max_events=100 --out " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto results = read_json(dir / "results.json");
  const auto dropped = results["trace_dropped"].get<std::uint64_t>();
  ASSERT_GT(dropped, 0u);
  EXPECT_NE(
      r.output.find("warning: trace.json is incomplete: " + std::to_string(dropped) + " events beyond 100"),
      std::string::npos)
      << r.output;
  const Trace trace = load_trace(dir / "trace.json");
  EXPECT_EQ(trace.other["dropped_spans"], dropped);
  EXPECT_NE(trace.other["warning"].get<std::string>().find("output.trace_max_events"), std::string::npos);
  // A whole trace says nothing of the kind.
  const auto whole = fresh_dir("trace-whole");
  const auto w = run_pstwin("sim scenarios/quickstart.toml --out " + whole.string());
  ASSERT_EQ(w.exit_code, 0) << w.output;
  EXPECT_EQ(w.output.find("trace.json is incomplete"), std::string::npos) << w.output;
  EXPECT_FALSE(load_trace(whole / "trace.json").other.contains("warning"));
}

// A window of iterations and keys keeps those spans (and the untagged ones) and no others, in the
// simulator and in a real job; a window that is not [from, until) is refused naming the field.
TEST(Trace, AWindowKeepsOnlyItsIterationsAndKeys) {
  const std::string window = " --set output.trace_iterations=[2,4] --set output.trace_keys=[1]";
  for (const std::string command : {"sim", "run"}) {
    const auto dir = fresh_dir("trace-window-" + command);
    const auto r = run_pstwin(command + " scenarios/quickstart.toml -q" + window + " --out " + dir.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const Trace trace = load_trace(dir / "trace.json");
    std::set<std::uint64_t> iterations;
    std::size_t untagged = 0;
    for (const auto& s : trace.spans) {
      if (!s.args.contains("iteration")) {
        ++untagged;
        continue;
      }
      EXPECT_EQ(s.args["key"], 1) << command << ": " << s.name << " " << s.args.dump();
      iterations.insert(s.args["iteration"].get<std::uint64_t>());
    }
    EXPECT_EQ(iterations, (std::set<std::uint64_t>{2, 3})) << command;
    EXPECT_GT(untagged, 0u) << command << ": compute spans belong in every window";
  }
  for (const std::string bad : {"[3,3]", "[5]", "[4,2]"}) {
    const auto r = run_pstwin("check scenarios/quickstart.toml --set output.trace_iterations=" + bad);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("output.trace_iterations"), std::string::npos) << r.output;
  }
}

TEST(Trace, LaneNamesUseTheNodeTable) {
  RunReport report;
  report.nodes = {{1, Role::kScheduler, 0, "a", "h0"},
                  {8, Role::kServer, 0, "b", "h1"},
                  {9, Role::kWorker, 0, "c", "h2"}};
  report.trace = {{"worker 0", 2, "send->8", "send", "push", 0, 1, TraceMessage{1, 0, 64}},
                  {"server 0", 1, "recv<-9", "receive", "push", 0, 1, TraceMessage{1, 0, 64}},
                  {"server 0", 1, "send->1", "send", "heartbeat", 0, 1, std::nullopt},
                  {"server 0", 1, "send->77", "send", "x", 0, 1, std::nullopt}};
  const auto doc = nlohmann::json::parse(trace_json(report));
  std::set<std::string> lanes;
  for (const auto& e : doc["traceEvents"])
    if (e["name"] == "thread_name") lanes.insert(e["args"]["name"]);
  EXPECT_EQ(lanes,
            (std::set<std::string>{"send->server 0", "recv<-worker 0", "send->scheduler", "send->77"}));
}

// Each worker's iteration is split without gaps or double counting: its parts add up to the
// iteration, and the slowest worker's sum is the iteration time results.json reports.
TEST(Breakdown, PartsAddUpToEachIterationAndTheSummaryNamesTheLargest) {
  const auto dir = fresh_dir("breakdown");
  const auto r = run_pstwin(
      "sim scenarios/saturation_8w2s.toml --set roles.servers=4 --set workload.iterations=3 "
      "--out " +
      dir.string());
  const auto results = read_json(dir / "results.json");
  ASSERT_TRUE(results.contains("breakdown")) << r.output;
  const auto& breakdown = results["breakdown"];
  std::map<std::uint32_t, double> slowest;
  std::size_t entries = 0;
  for (const auto& w : breakdown["workers"]) {
    double sum = 0;
    for (const char* part :
         {"compute_s", "push_s", "credit_wait_s", "copy_s", "pull_s", "aggregate_wait_s"}) {
      EXPECT_GE(w[part].get<double>(), 0) << w.dump();
      sum += w[part].get<double>();
    }
    auto& s = slowest[w["iteration"].get<std::uint32_t>()];
    s = std::max(s, sum);
    ++entries;
  }
  EXPECT_EQ(entries, 8u * 3u);
  for (const auto& it : results["iterations"])
    EXPECT_NEAR(slowest[it["index"].get<std::uint32_t>()], it["time_s"].get<double>(), 1e-9) << it.dump();
  // 4 servers for 8 workers: pushes wait for credit (ps.scheduling_credit = 4), the cause of the gap.
  const std::string summary = breakdown["summary"];
  EXPECT_NE(summary.find("ps.scheduling_credit = 4"), std::string::npos) << summary;
  EXPECT_NE(r.output.find("time breakdown: " + summary), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the credit, not the network, limits the pipeline"), std::string::npos) << r.output;
  // 2 servers: as much waiting for credit, but within 4 % of the bound: the network is the limit.
  const auto two = run_pstwin("sim scenarios/saturation_8w2s.toml --set workload.iterations=3 --out " +
                              fresh_dir("breakdown-2").string());
  EXPECT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("within 10 % of the bound, the network is the limit"), std::string::npos)
      << two.output;
  ASSERT_EQ(breakdown["servers"].size(), 4u);
  const double run_time = results["run_time_s"];
  for (const auto& server : breakdown["servers"]) {
    EXPECT_GT(server["idle_s"].get<double>(), 0) << server.dump();
    EXPECT_LE(server["idle_s"].get<double>(), run_time);
    EXPECT_GT(server["receive_s"].get<double>(), 0) << server.dump();
  }
}

}  // namespace
}  // namespace pstwin
