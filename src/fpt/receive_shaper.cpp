#include "fpt/receive_shaper.hpp"

#include <algorithm>
#include <cmath>

namespace pstwin::fpt {

std::optional<std::string> ReceiveShaper::set_weights(std::uint64_t version,
                                                      std::span<const PeerWeight> weights) {
  return weights_.replace(version, weights);
}

TokenBucket::TokenBucket(double rate_Bps, double depth_bytes, double now_s)
    : rate_Bps_(std::max(rate_Bps, 1.0)),
      depth_bytes_(std::max(depth_bytes, 1.0)),
      tokens_(depth_bytes_),
      last_s_(now_s) {}

void TokenBucket::refill(double now_s) {
  if (now_s <= last_s_) return;  // a clock that did not move (or stepped back) adds nothing
  tokens_ = std::min(depth_bytes_, tokens_ + (now_s - last_s_) * rate_Bps_);
  last_s_ = now_s;
}

std::uint64_t TokenBucket::available() const {
  return static_cast<std::uint64_t>(std::floor(tokens_));
}

void TokenBucket::take(std::uint64_t bytes) {
  tokens_ = std::max(0.0, tokens_ - static_cast<double>(bytes));
}

double TokenBucket::seconds_until(std::uint64_t bytes) const {
  const double wanted = std::min(static_cast<double>(bytes), depth_bytes_);
  return wanted <= tokens_ ? 0 : (wanted - tokens_) / rate_Bps_;
}

}  // namespace pstwin::fpt
