// A half-open range of keys [begin, end): the keys one server holds.
#ifndef PS_RANGE_H_
#define PS_RANGE_H_

#include <cstdint>

namespace ps {

class Range {
 public:
  Range() = default;
  Range(std::uint64_t begin, std::uint64_t end) : begin_(begin), end_(end) {}
  std::uint64_t begin() const { return begin_; }
  std::uint64_t end() const { return end_; }
  std::uint64_t size() const { return end_ - begin_; }

 private:
  std::uint64_t begin_ = 0;
  std::uint64_t end_ = 0;
};

}  // namespace ps

#endif  // PS_RANGE_H_
