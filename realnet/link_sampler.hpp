// Kernel byte counters of a namespace cluster's links, sampled through the run (`pstwin run --netns`),
// so utilisation can be read over any part of it afterwards: the push/pull phase, not the whole job
// with its setup, probe iterations and shutdown. One thread enters the switch namespace and reads its
// /proc/net/dev every `interval`; times are the steady clock's, as the nodes' iteration times are.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace pstwin::realnet {

struct LinkCounters {
  std::uint64_t rx = 0;  // bytes the switch port received: what the host sent (<h>.up)
  std::uint64_t tx = 0;  // bytes it sent to the host (<h>.down)
};

// Counters per interface over time, and the bytes a link carried between two times (linear between
// samples, clamped to the first and last sample).
class CounterSeries {
 public:
  struct Sample {
    double at_s = 0;  // steady clock, seconds
    std::vector<LinkCounters> links;
  };
  void add(Sample sample) { samples_.push_back(std::move(sample)); }
  bool empty() const { return samples_.empty(); }
  // Bytes on link `index` (`down`: switch -> host, else host -> switch) from `from_s` to `to_s`.
  double bytes(std::size_t index, bool down, double from_s, double to_s) const;

 private:
  double at(std::size_t index, bool down, double t) const;
  std::vector<Sample> samples_;
};

// Utilisation of one link over a set of disjoint intervals: bytes in them / (bandwidth x their length).
double utilisation_over(const CounterSeries& series, std::size_t index, bool down, double bandwidth_Bps,
                        std::span<const std::pair<double, double>> intervals);
// The union of intervals, sorted and merged.
std::vector<std::pair<double, double>> merged(std::vector<std::pair<double, double>> intervals);

class LinkSampler {
 public:
  // `switch_netns_fd`: the switch namespace; `interfaces`: its ports, in the order samples list them.
  LinkSampler(int switch_netns_fd, std::vector<std::string> interfaces, std::chrono::microseconds interval);
  ~LinkSampler();
  LinkSampler(const LinkSampler&) = delete;
  LinkSampler& operator=(const LinkSampler&) = delete;

  // Stops the thread; the samples taken ("" error) or why there are none.
  CounterSeries stop();
  const std::string& error() const { return error_; }

 private:
  void run(int fd, std::chrono::microseconds interval);
  std::vector<std::string> interfaces_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  CounterSeries series_;
  std::string error_;
  std::jthread thread_;
};

}  // namespace pstwin::realnet
