#include "realnet/link_sampler.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace pstwin::realnet {
namespace {

double steady_now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// /proc/net/dev: two header lines, then "  name: rx_bytes rx_packets ... (8 fields) tx_bytes ...".
std::vector<LinkCounters> parse_dev(const std::string& text, const std::vector<std::string>& interfaces) {
  std::vector<LinkCounters> out(interfaces.size());
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto first = line.find_first_not_of(' ');
    const std::string name = line.substr(first, colon - first);
    const auto it = std::find(interfaces.begin(), interfaces.end(), name);
    if (it == interfaces.end()) continue;
    std::istringstream fields(line.substr(colon + 1));
    std::uint64_t value = 0;
    auto& c = out[static_cast<std::size_t>(it - interfaces.begin())];
    for (int i = 0; i < 9 && fields >> value; ++i) {
      if (i == 0) c.rx = value;
      if (i == 8) c.tx = value;
    }
  }
  return out;
}

}  // namespace

double CounterSeries::at(std::size_t index, bool down, double t) const {
  auto value = [&](const Sample& s) {
    const auto& c = s.links.at(index);
    return static_cast<double>(down ? c.tx : c.rx);
  };
  if (t <= samples_.front().at_s) return value(samples_.front());
  if (t >= samples_.back().at_s) return value(samples_.back());
  const auto next = std::upper_bound(samples_.begin(), samples_.end(), t,
                                     [](double x, const Sample& s) { return x < s.at_s; });
  const auto prev = next - 1;
  const double span = next->at_s - prev->at_s;
  const double w = span > 0 ? (t - prev->at_s) / span : 0;
  return value(*prev) + w * (value(*next) - value(*prev));
}

double CounterSeries::bytes(std::size_t index, bool down, double from_s, double to_s) const {
  if (samples_.empty() || to_s <= from_s) return 0;
  return at(index, down, to_s) - at(index, down, from_s);
}

std::vector<std::pair<double, double>> merged(std::vector<std::pair<double, double>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  std::vector<std::pair<double, double>> out;
  for (const auto& [a, b] : intervals) {
    if (b <= a) continue;
    if (!out.empty() && a <= out.back().second)
      out.back().second = std::max(out.back().second, b);
    else
      out.emplace_back(a, b);
  }
  return out;
}

double utilisation_over(const CounterSeries& series, std::size_t index, bool down, double bandwidth_Bps,
                        std::span<const std::pair<double, double>> intervals) {
  double bytes = 0, seconds = 0;
  for (const auto& [a, b] : intervals) {
    bytes += series.bytes(index, down, a, b);
    seconds += b - a;
  }
  return seconds > 0 && bandwidth_Bps > 0 ? bytes / (bandwidth_Bps * seconds) : 0;
}

LinkSampler::LinkSampler(int switch_netns_fd, std::vector<std::string> interfaces,
                         std::chrono::microseconds interval)
    : interfaces_(std::move(interfaces)) {
  const int fd = ::dup(switch_netns_fd);  // the thread owns its copy: the cluster may close its own
  if (fd < 0) {
    error_ = std::string("dup: ") + std::strerror(errno);
    return;
  }
  thread_ = std::jthread([this, fd, interval] { run(fd, interval); });
}

LinkSampler::~LinkSampler() {
  stopping_ = true;
}

void LinkSampler::run(int netns_fd, std::chrono::microseconds interval) {
  // setns moves only this thread; /proc/thread-self/net is then the switch namespace's.
  const bool entered = ::setns(netns_fd, CLONE_NEWNET) == 0;
  const int setns_error = errno;
  ::close(netns_fd);
  const int dev = entered ? ::open("/proc/thread-self/net/dev", O_RDONLY | O_CLOEXEC) : -1;
  if (dev < 0) {
    const std::lock_guard lock(mutex_);
    error_ = entered ? std::string("open /proc/thread-self/net/dev: ") + std::strerror(errno)
                     : std::string("setns into the switch namespace: ") + std::strerror(setns_error);
    return;
  }
  std::string text;
  char buffer[8192];
  while (!stopping_) {
    text.clear();
    ::lseek(dev, 0, SEEK_SET);
    for (ssize_t n; (n = ::read(dev, buffer, sizeof buffer)) > 0;)
      text.append(buffer, static_cast<std::size_t>(n));
    CounterSeries::Sample sample{steady_now_s(), parse_dev(text, interfaces_)};
    {
      const std::lock_guard lock(mutex_);
      series_.add(std::move(sample));
    }
    std::this_thread::sleep_for(interval);
  }
  ::close(dev);
}

CounterSeries LinkSampler::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  const std::lock_guard lock(mutex_);
  return std::move(series_);
}

}  // namespace pstwin::realnet
