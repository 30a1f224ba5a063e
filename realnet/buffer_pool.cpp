#include "realnet/buffer_pool.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace pstwin::realnet {

namespace {

constexpr std::size_t kAlignment = 64;

// Capacities are rounded up to 4 KiB pages, so frames of nearly equal size share buffers.
std::size_t capacity_for(std::size_t size) {
  constexpr std::size_t kPage = 4096;
  return (std::max<std::size_t>(size, 1) + kPage - 1) / kPage * kPage;
}

std::byte* align_inside(void* raw) {
  const auto address = reinterpret_cast<std::uintptr_t>(raw);
  return reinterpret_cast<std::byte*>((address + kAlignment - 1) / kAlignment * kAlignment);
}

}  // namespace

std::shared_ptr<BufferPool> BufferPool::create(std::uint64_t max_cached_bytes) {
  return std::make_shared<BufferPool>(Token{}, max_cached_bytes);
}

BufferPool::~BufferPool() {
  for (auto& [capacity, buffers] : idle_)
    for (void* raw : buffers) std::free(raw);
}

std::shared_ptr<ByteBuffer> BufferPool::take(std::size_t size) {
  const std::size_t capacity = capacity_for(size);
  void* raw = nullptr;
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
    // Not std::aligned_alloc: glibc's memalign frees the alignment slack as separate small chunks,
    // which keep a freed 16 MiB buffer from coalescing with its neighbours; the heap then grew by a
    // buffer every few frames all run long and each new page was faulted in (and zeroed) under
    // readv: 16 % of a 16 MiB pipelined run's cycles. A plain malloc with the slack inside is freed
    // whole, and for a page-multiple size asks for what ByteBuffer does, so a freed push buffer
    // fits a received one and back (docs/PERFORMANCE.md, "Large messages").
    raw = std::malloc(capacity + kAlignment);
    if (raw == nullptr) throw std::bad_alloc();
  }
  return std::make_shared<ByteBuffer>(align_inside(raw), size, [pool = shared_from_this(), raw, capacity] {
    pool->give_back(raw, capacity);
  });
}

void BufferPool::give_back(void* raw, std::size_t capacity) {
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
