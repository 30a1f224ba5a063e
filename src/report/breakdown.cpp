#include "report/breakdown.hpp"

#include <algorithm>
#include <array>
#include <iomanip>
#include <sstream>

namespace pstwin {
namespace {

// "worker 3" -> 3 for a worker's process label; -1 for any other.
int rank_in(std::string_view process, std::string_view role) {
  if (!process.starts_with(role) || process.size() <= role.size() || process[role.size()] != ' ') return -1;
  int rank = 0;
  bool digits = false;
  for (const char c : process.substr(role.size() + 1)) {
    if (c < '0' || c > '9') break;
    rank = rank * 10 + (c - '0');
    digits = true;
  }
  return digits ? rank : -1;
}

using Interval = std::pair<Seconds, Seconds>;

bool covers(const std::vector<Interval>& intervals, Seconds at) {
  return std::ranges::any_of(intervals, [at](const Interval& i) { return i.first <= at && at < i.second; });
}

double union_length(std::vector<Interval> intervals, Seconds from, Seconds to) {
  for (auto& i : intervals) i = {std::max(i.first, from), std::min(i.second, to)};
  std::erase_if(intervals, [](const Interval& i) { return i.second <= i.first; });
  std::ranges::sort(intervals);
  double total = 0;
  Seconds reached = from;
  for (const auto& [start, end] : intervals) {
    const Seconds begin = std::max(start, reached);
    if (end > begin) total += end - begin;
    reached = std::max(reached, end);
  }
  return total;
}

std::string percent(double part, double whole) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(0) << (whole > 0 ? 100 * part / whole : 0) << " %";
  return out.str();
}

}  // namespace

void BreakdownRecorder::iteration_done(int worker, std::uint32_t iteration, Seconds start, Seconds end) {
  auto& it = iterations_[{worker, iteration}];
  it.start = start;
  it.end = end;
  it.done = true;
}

void BreakdownRecorder::span(const SpanView& span) {
  if (const int server = rank_in(span.process, "server"); server >= 0) {
    auto at = servers_.find(span.process);
    if (at == servers_.end()) at = servers_.emplace(std::string(span.process), ServerSpans{}).first;
    auto& times = at->second;
    if (span.category == "engine") times.aggregate.emplace_back(span.start_s, span.end_s);
    if (span.category == "receive") times.receive.emplace_back(span.start_s, span.end_s);
    if (span.category == "send") times.send.emplace_back(span.start_s, span.end_s);
    return;
  }
  const int worker = rank_in(span.process, "worker");
  if (worker < 0) return;
  if (span.category == "compute") {
    compute_[worker].emplace_back(span.start_s, span.end_s);
    return;
  }
  if (!span.message) return;
  const auto& m = *span.message;
  // Most of a worker's spans (its sends, most receives) count in no class: only these find their
  // iteration, a tree lookup.
  if (span.category == "copy") {
    auto& it = iterations_[{worker, m.iteration}];
    it.copy.emplace_back(span.start_s, span.end_s);
    it.staged[m.key] = span.end_s;
  } else if (span.category == "push" && span.name == "push") {
    auto& it = iterations_[{worker, m.iteration}];
    it.in_flight.emplace_back(span.start_s, span.end_s);
    it.dispatched[m.key] = span.start_s;
  } else if (span.category == "receive" && span.name == "pull response") {
    iterations_[{worker, m.iteration}].pull.emplace_back(span.start_s, span.end_s);
  }
}

TimeBreakdown BreakdownRecorder::finish(Seconds run_time, int credit) const {
  TimeBreakdown breakdown;
  WorkerTimes total;
  double iteration_total = 0;
  for (const auto& [id, it] : iterations_) {
    if (!it.done) continue;
    const auto& [worker, iteration] = id;
    // Waiting for credit: from a partition's copy ending to the credit letting it go.
    std::vector<Interval> waiting;
    for (const auto& [key, staged] : it.staged)
      if (const auto d = it.dispatched.find(key); d != it.dispatched.end() && d->second > staged)
        waiting.emplace_back(staged, d->second);
    static const std::vector<Interval> kNone;
    const auto compute = compute_.find(worker);
    const auto& computing = compute == compute_.end() ? kNone : compute->second;
    // Each elementary segment between two interval ends goes to the first class that covers it.
    std::vector<Seconds> cuts = {it.start, it.end};
    const std::array<const std::vector<Interval>*, 5> sets = {&computing, &it.in_flight, &waiting, &it.copy,
                                                              &it.pull};
    for (const auto* set : sets)
      for (const auto& [a, b] : *set) {
        if (a > it.start && a < it.end) cuts.push_back(a);
        if (b > it.start && b < it.end) cuts.push_back(b);
      }
    std::ranges::sort(cuts);
    WorkerTimes times{worker, iteration};
    // Waiting for credit before a push in flight: a worker holding staged partitions back is limited
    // by its credit, however many of its pushes are on the way.
    const std::array<std::pair<const std::vector<Interval>*, double WorkerTimes::*>, 5> order = {{
        {&computing, &WorkerTimes::compute_s},
        {&waiting, &WorkerTimes::credit_wait_s},
        {&it.in_flight, &WorkerTimes::push_s},
        {&it.copy, &WorkerTimes::copy_s},
        {&it.pull, &WorkerTimes::pull_s},
    }};
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      const Seconds length = cuts[i + 1] - cuts[i];
      if (length <= 0) continue;
      const Seconds middle = cuts[i] + length / 2;
      double WorkerTimes::*slot = &WorkerTimes::aggregate_wait_s;
      for (const auto& [set, field] : order)
        if (covers(*set, middle)) {
          slot = field;
          break;
        }
      times.*slot += length;
    }
    for (const auto field : {&WorkerTimes::compute_s, &WorkerTimes::push_s, &WorkerTimes::credit_wait_s,
                             &WorkerTimes::copy_s, &WorkerTimes::pull_s, &WorkerTimes::aggregate_wait_s})
      total.*field += times.*field;
    iteration_total += it.end - it.start;
    breakdown.workers.push_back(times);
  }
  double idle_total = 0;
  for (const auto& [name, times] : servers_) {
    std::vector<Interval> busy = times.aggregate;
    busy.insert(busy.end(), times.receive.begin(), times.receive.end());
    busy.insert(busy.end(), times.send.begin(), times.send.end());
    ServerTimes server{name, union_length(times.aggregate, 0, run_time),
                       union_length(times.receive, 0, run_time), union_length(times.send, 0, run_time),
                       run_time - union_length(busy, 0, run_time)};
    idle_total += server.idle_s;
    breakdown.servers.push_back(std::move(server));
  }
  if (iteration_total <= 0) return breakdown;
  // The largest share of the workers' iteration time, and what it points at.
  const std::array<std::pair<double, std::string>, 6> shares = {{
      {total.compute_s, "computing (workload.compute)"},
      {total.credit_wait_s, "staged partitions waiting for credit (ps.scheduling_credit = " +
                                std::to_string(credit) + " pushes in flight at most)"},
      {total.push_s, "pushes in flight (the network and the servers receiving them)"},
      {total.copy_s, "copying into staging buffers (staging.copy_bandwidth)"},
      {total.pull_s, "receiving pull responses"},
      {total.aggregate_wait_s, "waiting for the aggregate (the other workers' pushes, the servers' summing)"},
  }};
  const auto largest = std::ranges::max_element(shares, {}, [](const auto& s) { return s.first; });
  std::ostringstream out;
  out << "largest share of the workers' iteration time: " << largest->second << ", "
      << percent(largest->first, iteration_total);
  if (largest != shares.begin() + 1 && total.credit_wait_s > 0)
    out << " (waiting for credit " << percent(total.credit_wait_s, iteration_total) << ")";
  if (!breakdown.servers.empty())
    out << "; servers idle " << percent(idle_total, run_time * static_cast<double>(breakdown.servers.size()))
        << " of the run";
  breakdown.largest = out.str();
  return breakdown;
}

}  // namespace pstwin
