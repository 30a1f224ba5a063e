#include "report/link_timeline.hpp"

#include <algorithm>
#include <cmath>

#include "core/assert.hpp"

namespace pstwin {

LinkTimeline::LinkTimeline(std::size_t links, double width_s, std::size_t max_buckets)
    : width_s_(width_s), max_buckets_(max_buckets), bytes_(links, std::vector<double>(max_buckets, 0.0)) {
  PSTWIN_ASSERT(width_s > 0 && max_buckets >= 2, "a link timeline needs a positive width and 2 buckets");
}

void LinkTimeline::widen_to(double end_s) {
  while (end_s >= width_s_ * static_cast<double>(max_buckets_)) {
    for (auto& buckets : bytes_) {
      for (std::size_t b = 0; b < max_buckets_ / 2; ++b) buckets[b] = buckets[2 * b] + buckets[2 * b + 1];
      if (max_buckets_ % 2 == 1) buckets[max_buckets_ / 2] = buckets[max_buckets_ - 1];
      std::fill(buckets.begin() + static_cast<std::ptrdiff_t>((max_buckets_ + 1) / 2), buckets.end(), 0.0);
    }
    used_ = (used_ + 1) / 2;
    width_s_ *= 2;
  }
}

void LinkTimeline::add(std::size_t link, double start_s, double end_s, double bytes) {
  PSTWIN_ASSERT(link < bytes_.size(), "no link " + std::to_string(link) + " in the timeline");
  start_s = std::max(0.0, start_s);
  end_s = std::max(start_s, end_s);
  widen_to(end_s);
  auto& buckets = bytes_[link];
  const auto first = static_cast<std::size_t>(start_s / width_s_);
  const auto last = std::min(max_buckets_ - 1, static_cast<std::size_t>(end_s / width_s_));
  used_ = std::max(used_, last + 1);
  if (first == last || end_s <= start_s) {
    buckets[std::min(first, last)] += bytes;
    return;
  }
  const double rate = bytes / (end_s - start_s);
  for (std::size_t b = first; b <= last; ++b) {
    const double from = std::max(start_s, static_cast<double>(b) * width_s_);
    const double to = std::min(end_s, static_cast<double>(b + 1) * width_s_);
    if (to > from) buckets[b] += rate * (to - from);
  }
}

std::vector<double> LinkTimeline::bytes(std::size_t link) const {
  const auto& buckets = bytes_.at(link);
  return {buckets.begin(), buckets.begin() + static_cast<std::ptrdiff_t>(used_)};
}

}  // namespace pstwin
