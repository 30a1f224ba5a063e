// The observer wrappers (ObserverFanout in the simulator and real nodes, LockedObserver in real nodes)
// must forward every report: a method left to RunObserver's empty default is lost without a trace
// (push_staleness was, and every bounded-staleness real run then failed its `updates` invariant).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ps/observer.hpp"
#include "realnet/locked_observer.hpp"

namespace pstwin {
namespace {

class ReportNames final : public RunObserver {
 public:
  std::vector<std::string> names;
  void node_table(const std::vector<NodeInfo>&, Seconds) override { names.emplace_back("node_table"); }
  void barrier_released(int, Seconds) override { names.emplace_back("barrier_released"); }
  void push_applied(NodeId, int, std::uint64_t, std::uint32_t) override {
    names.emplace_back("push_applied");
  }
  void duplicate_push(NodeId, int, std::uint64_t, std::uint32_t) override {
    names.emplace_back("duplicate_push");
  }
  void aggregate_complete(NodeId, std::uint64_t, std::uint32_t, const Payload&) override {
    names.emplace_back("aggregate_complete");
  }
  void pull_received(int, std::uint64_t, std::uint32_t, const Payload&) override {
    names.emplace_back("pull_received");
  }
  void iteration_done(int, std::uint32_t, Seconds, Seconds) override { names.emplace_back("iteration_done"); }
  void final_store(NodeId, std::uint64_t, const Payload&) override { names.emplace_back("final_store"); }
  void tag_checked(NodeId, bool, const std::string&) override { names.emplace_back("tag_checked"); }
  void push_staleness(NodeId, int, std::uint64_t, std::uint32_t, std::uint64_t, bool) override {
    names.emplace_back("push_staleness");
  }
  void candidate_judged(int, int, std::uint32_t, bool) override { names.emplace_back("candidate_judged"); }
  void model_snapshot(int, std::uint32_t, Seconds, std::span<const float>) override {
    names.emplace_back("model_snapshot");
  }
  void lb_decision(NodeId, const LbDecision&) override { names.emplace_back("lb_decision"); }
  void lb_report(NodeId, const LbReport&) override { names.emplace_back("lb_report"); }
  void request_routed(NodeId, NodeId, std::uint64_t, std::uint32_t) override {
    names.emplace_back("request_routed");
  }
};

// Calls every RunObserver method once, in declaration order.
void report_everything(RunObserver& observer) {
  const Payload payload;
  observer.node_table({}, 0);
  observer.barrier_released(0, 0);
  observer.push_applied(1, 0, 2, 3);
  observer.duplicate_push(1, 0, 2, 3);
  observer.aggregate_complete(1, 2, 3, payload);
  observer.pull_received(0, 2, 3, payload);
  observer.iteration_done(0, 3, 0, 1);
  observer.final_store(1, 2, payload);
  observer.tag_checked(1, true, "");
  observer.push_staleness(1, 0, 2, 3, 4, false);
  observer.candidate_judged(0, 0, 3, true);
  observer.model_snapshot(0, 3, 1, {});
  observer.lb_decision(1, LbDecision{});
  observer.lb_report(1, LbReport{});
  observer.request_routed(1, 2, 2, 3);
}

const std::vector<std::string> kEveryReport{
    "node_table",       "barrier_released", "push_applied", "duplicate_push", "aggregate_complete",
    "pull_received",    "iteration_done",   "final_store",  "tag_checked",    "push_staleness",
    "candidate_judged", "model_snapshot",   "lb_decision",  "lb_report",      "request_routed"};

TEST(Observers, TheFanoutForwardsEveryReportToEachTarget) {
  ReportNames first, second;
  ObserverFanout fanout({&first, &second});
  report_everything(fanout);
  EXPECT_EQ(first.names, kEveryReport);
  EXPECT_EQ(second.names, kEveryReport);
}

TEST(Observers, TheLockedObserverForwardsEveryReport) {
  ReportNames target;
  realnet::LockedObserver locked(target);
  report_everything(locked);
  EXPECT_EQ(target.names, kEveryReport);
}

}  // namespace
}  // namespace pstwin
