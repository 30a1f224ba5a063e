// Bytes each link carried over time, for utilisation over time (results.json `links[].over_time`,
// `pstwin plot`'s links_over_time). Equal buckets from time 0 that widen as the run grows: at most
// `max_buckets`, and a transfer that ends past the last one doubles the width (adjacent buckets
// merged), so memory stays bounded whatever the run's length. A transfer's bytes are spread evenly
// over its [start, end].
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace pstwin {

class LinkTimeline {
 public:
  // `links`: how many links; `width_s`: the first bucket width (> 0).
  explicit LinkTimeline(std::size_t links, double width_s = 1e-3, std::size_t max_buckets = 200);

  void add(std::size_t link, double start_s, double end_s, double bytes);
  double width_s() const { return width_s_; }
  // The link's bytes per bucket, up to the last bucket any link used.
  std::vector<double> bytes(std::size_t link) const;

 private:
  void widen_to(double end_s);

  double width_s_;
  std::size_t max_buckets_;
  std::size_t used_ = 0;                    // buckets in use (the furthest any link reached)
  std::vector<std::vector<double>> bytes_;  // per link, max_buckets_ each
};

}  // namespace pstwin
