// Where each worker's iteration and each server's run time went, from every span a backend records
// (whether or not trace.json keeps them): results.json's `breakdown` and the summary's sentence on the
// largest gap (docs/TRACE.md, "Time breakdown").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ps/observer.hpp"
#include "report/run_report.hpp"

namespace pstwin {

// A span as a backend records it, borrowed: the breakdown reads every span of a run, and copying
// each one's strings into a TraceSpan cost more than what it does with them.
struct SpanView {
  std::string_view process;  // node label, e.g. "worker 0 (h1)"
  std::string_view category;
  std::string_view name;
  Seconds start_s = 0;
  Seconds end_s = 0;
  const TraceMessage* message = nullptr;  // null: the span carries none
};

class BreakdownRecorder final : public RunObserver {
 public:
  void iteration_done(int worker, std::uint32_t iteration, Seconds start, Seconds end) override;
  // Every span of the run, as the backend records it (before output.trace's cap).
  void span(const SpanView& span);

  // The breakdown of a run that ended at `run_time`; `credit` is ps.scheduling_credit (0: no limit).
  TimeBreakdown finish(Seconds run_time, int credit) const;

 private:
  using Interval = std::pair<Seconds, Seconds>;
  struct WorkerIteration {
    Seconds start = 0;
    Seconds end = 0;
    bool done = false;
    std::vector<Interval> copy, in_flight, pull;
    std::map<std::uint64_t, Seconds> staged;      // key -> copy end
    std::map<std::uint64_t, Seconds> dispatched;  // key -> the credit let it go
  };
  std::map<int, std::vector<Interval>> compute_;  // by worker rank
  std::map<std::pair<int, std::uint32_t>, WorkerIteration> iterations_;
  struct ServerSpans {
    std::vector<Interval> aggregate, receive, send;
  };
  std::map<std::string, ServerSpans, std::less<>> servers_;  // by process label
};

}  // namespace pstwin
