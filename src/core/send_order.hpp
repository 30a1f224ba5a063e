// The order in which one connection sends what is queued for it, in every backend: header-only
// messages (acks, pull requests, heartbeats) before bulk data, then higher priority first, then
// send order. Equal messages keep FIFO order, as a TCP stream would; bytes already handed to the
// transport are never reordered. This is a send pool's discipline (ps-lite's P3 van, FPT).
#pragma once

#include <cstdint>
#include <tuple>

#include "core/message.hpp"

namespace pstwin {

using SendOrderKey = std::tuple<bool, std::int64_t, std::uint64_t>;  // (bulk, -priority, sequence)

inline SendOrderKey send_order_key(const Message& message) {
  return {!message.payload.empty(), -static_cast<std::int64_t>(message.header.priority),
          message.header.sequence};
}

}  // namespace pstwin
