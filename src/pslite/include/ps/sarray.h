// SArray<V>: a shared array. Copies share the memory (a zero-copy view); SArray<W> to SArray<V> views
// the same bytes as another type. The memory is owned (allocated here, or adopted with a deleter) or,
// for SArray(data, size) without `deletable`, borrowed from the caller, who keeps it alive.
#ifndef PS_SARRAY_H_
#define PS_SARRAY_H_

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <ostream>
#include <vector>

#include "ps/internal/utils.h"
#include "ps/range.h"

namespace ps {

template <typename V>
class SArray {
 public:
  SArray() = default;
  explicit SArray(std::size_t size, V val = 0) { resize(size, val); }
  // Views `data`; with `deletable` the array owns it and delete[]s it when the last copy goes.
  SArray(V* data, std::size_t size, bool deletable = false) {
    if (deletable)
      reset(data, size, [](V* p) { delete[] p; });
    else
      reset(data, size, [](V*) {});
  }
  // A view of another array's bytes as V (the byte size must be a multiple of sizeof(V)).
  template <typename W>
  SArray(const SArray<W>& other) {  // NOLINT: implicit, as ps-lite's
    *this = other;
  }
  template <typename W>
  void operator=(const SArray<W>& other) {
    const std::size_t bytes = other.size() * sizeof(W);
    CHECK_EQ(bytes % sizeof(V), 0u) << "an SArray of " << bytes << " bytes cannot be viewed as " << sizeof(V)
                                    << "-byte values";
    size_ = bytes / sizeof(V);
    capacity_ = other.capacity() * sizeof(W) / sizeof(V);
    ptr_ = std::shared_ptr<V>(other.ptr(), reinterpret_cast<V*>(other.data()));
  }
  // Copies.
  template <typename W>
  explicit SArray(const std::vector<W>& vec) {
    CopyFrom(vec.data(), vec.size());
  }
  template <typename W>
  SArray(const std::initializer_list<W>& list) {
    CopyFrom(list.begin(), list.end());
  }
  template <typename W>
  void operator=(const std::initializer_list<W>& list) {
    CopyFrom(list.begin(), list.end());
  }
  // Shares the vector's memory (no copy); the array keeps the vector alive.
  explicit SArray(const std::shared_ptr<std::vector<V>>& vec)
      : size_(vec->size()), capacity_(vec->size()), ptr_(vec, vec->data()) {}

  template <typename W>
  void CopyFrom(const W* data, std::size_t size) {
    resize(size);
    std::copy(data, data + size, begin());
  }
  void CopyFrom(const SArray<V>& other) {
    if (this != &other) CopyFrom(other.data(), other.size());
  }
  template <typename ForwardIt>
  void CopyFrom(const ForwardIt& first, const ForwardIt& last) {
    resize(static_cast<std::size_t>(std::distance(first, last)));
    std::copy(first, last, begin());
  }

  template <typename Deleter>
  void reset(V* data, std::size_t size, Deleter del) {
    size_ = size;
    capacity_ = size;
    ptr_.reset(data, del);
  }
  // Grows into fresh memory when the capacity is short (other copies keep the old); new elements are `val`.
  void resize(std::size_t size, V val = 0) {
    const std::size_t old = size_;
    if (size > capacity_) reserve(std::max(size, capacity_ + capacity_ / 2));
    size_ = size;
    if (size > old) std::fill(data() + old, data() + size, val);
  }
  void reserve(std::size_t size) {
    if (size <= capacity_) return;
    auto block = std::make_shared<std::vector<V>>(size);
    if (size_ > 0) std::copy(begin(), end(), block->begin());
    ptr_ = std::shared_ptr<V>(block, block->data());
    capacity_ = size;
  }
  void clear() {
    reset(nullptr, 0, [](V*) {});
  }
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  V* begin() { return data(); }
  const V* begin() const { return data(); }
  V* end() { return data() + size_; }
  const V* end() const { return data() + size_; }
  V* data() const { return ptr_.get(); }
  const std::shared_ptr<V>& ptr() const { return ptr_; }
  V& operator[](std::size_t i) { return data()[i]; }
  const V& operator[](std::size_t i) const { return data()[i]; }
  V& back() { return data()[size_ - 1]; }
  const V& back() const { return data()[size_ - 1]; }
  V& front() { return data()[0]; }
  const V& front() const { return data()[0]; }
  void push_back(const V& val) {
    if (size_ == capacity_) reserve(size_ * 2 + 5);
    data()[size_++] = val;
  }
  void pop_back() {
    if (size_ > 0) --size_;
  }
  void append(const SArray<V>& other) {
    if (other.empty()) return;
    const std::size_t old = size_;
    resize(size_ + other.size());
    std::copy(other.begin(), other.end(), begin() + old);
  }
  // A view of elements [begin, end).
  SArray<V> segment(std::size_t begin, std::size_t end) const {
    CHECK_LE(begin, end);
    CHECK_LE(end, size_);
    SArray<V> part;
    part.ptr_ = std::shared_ptr<V>(ptr_, data() + begin);
    part.size_ = end - begin;
    part.capacity_ = end - begin;
    return part;
  }

 private:
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  std::shared_ptr<V> ptr_;
};

// The positions [lower_bound(lower), lower_bound(upper)) of a sorted array.
template <typename V>
Range FindRange(const SArray<V>& arr, V lower, V upper) {
  if (upper <= lower) return Range(0, 0);
  const auto lb = std::lower_bound(arr.begin(), arr.end(), lower);
  const auto ub = std::lower_bound(arr.begin(), arr.end(), upper);
  return Range(static_cast<std::uint64_t>(lb - arr.begin()), static_cast<std::uint64_t>(ub - arr.begin()));
}

template <typename V>
std::ostream& operator<<(std::ostream& os, const SArray<V>& arr) {
  os << "[" << arr.size() << "]:";
  const std::size_t shown = std::min<std::size_t>(arr.size(), 10);
  for (std::size_t i = 0; i < shown; ++i) os << ' ' << arr[i];
  if (shown < arr.size()) os << " ...";
  return os;
}

}  // namespace ps

#endif  // PS_SARRAY_H_
