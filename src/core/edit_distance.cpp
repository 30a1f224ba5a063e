#include "core/edit_distance.hpp"

#include <algorithm>
#include <span>
#include <vector>

namespace pstwin {

std::size_t edit_distance(std::string_view a, std::string_view b, std::size_t limit) {
  // Three rows of the table (a transposition looks two rows back), in one allocation.
  const std::size_t width = b.size() + 1;
  std::vector<std::size_t> rows(3 * width);
  std::size_t* before = rows.data();               // row i - 2
  std::size_t* previous = rows.data() + width;     // row i - 1
  std::size_t* current = rows.data() + 2 * width;  // row i
  for (std::size_t j = 0; j < width; ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    std::size_t row_min = i;
    for (std::size_t j = 1; j < width; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      std::size_t d = std::min(previous[j] + 1, current[j - 1] + 1);
      d = std::min(d, previous[j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d = std::min(d, before[j - 2] + 1);
      current[j] = d;
      row_min = std::min(row_min, d);
    }
    // No cell of a later row is below this row's least and the one before it (a transposition
    // reaches two rows back, at cost 1), so the distance is past `limit` for good.
    if (row_min > limit && std::ranges::min(std::span(previous, width)) > limit) return row_min;
    std::size_t* const reused = before;
    before = previous;
    previous = current;
    current = reused;
  }
  return previous[b.size()];
}

}  // namespace pstwin
