// Receive buffers recycled by size: a frame's payload buffer returns here when the last Payload
// sharing it goes (on whichever thread), and the next frame of that size reuses it. A stream of
// equal-sized frames then allocates nothing and never page-faults fresh memory in: measured on the
// loopback bench, a fresh 1 MiB buffer per frame cost about 256 page faults per frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/payload.hpp"

namespace pstwin::realnet {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
  struct Token {};  // only create() makes one: buffers keep the pool alive through shared_from_this

 public:
  // Keeps at most `max_cached_bytes` of idle buffers; more are freed when they come back.
  static std::shared_ptr<BufferPool> create(std::uint64_t max_cached_bytes);
  BufferPool(Token, std::uint64_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A 64-byte aligned buffer of `size` bytes, not zeroed (the caller fills every byte). The pool
  // lives until every buffer it handed out has come back.
  std::shared_ptr<ByteBuffer> take(std::size_t size);
  std::uint64_t cached_bytes() const;
  std::uint64_t reused() const;  // buffers handed out again instead of allocated

 private:
  void give_back(void* raw, std::size_t capacity);  // raw: what malloc returned

  const std::uint64_t max_cached_bytes_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> idle_;  // malloc's pointers, by capacity
  std::uint64_t cached_bytes_ = 0;
  std::uint64_t reused_ = 0;
};

}  // namespace pstwin::realnet
