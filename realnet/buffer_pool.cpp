#include "realnet/buffer_pool.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace pstwin::realnet {

namespace {

// Capacities are rounded up to 4 KiB pages, so frames of nearly equal size share buffers.
std::size_t capacity_for(std::size_t size) {
  constexpr std::size_t kPage = 4096;
  return (std::max<std::size_t>(size, 1) + kPage - 1) / kPage * kPage;
}

}  // namespace

std::shared_ptr<BufferPool> BufferPool::create(std::uint64_t max_cached_bytes) {
  return std::make_shared<BufferPool>(Token{}, max_cached_bytes);
}

BufferPool::~BufferPool() {
  for (auto& [capacity, buffers] : idle_)
    for (std::byte* raw : buffers) std::free(raw);
}

std::shared_ptr<ByteBuffer> BufferPool::take(std::size_t size) {
  const std::size_t capacity = capacity_for(size);
  std::byte* raw = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (auto it = idle_.find(capacity); it != idle_.end() && !it->second.empty()) {
      raw = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= capacity;
      ++reused_;
    }
  }
  if (raw == nullptr) {
    raw = static_cast<std::byte*>(std::aligned_alloc(64, capacity));
    if (raw == nullptr) throw std::bad_alloc();
  }
  return std::make_shared<ByteBuffer>(
      raw, size, [pool = shared_from_this(), raw, capacity] { pool->give_back(raw, capacity); });
}

void BufferPool::give_back(std::byte* raw, std::size_t capacity) {
  {
    std::lock_guard lock(mutex_);
    if (cached_bytes_ + capacity <= max_cached_bytes_) {
      idle_[capacity].push_back(raw);
      cached_bytes_ += capacity;
      return;
    }
  }
  std::free(raw);
}

std::uint64_t BufferPool::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_bytes_;
}

std::uint64_t BufferPool::reused() const {
  std::lock_guard lock(mutex_);
  return reused_;
}

}  // namespace pstwin::realnet
