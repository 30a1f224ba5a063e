// Edit distance for "did you mean" suggestions (scenario fields, environment variables).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pstwin {

// Insertions, deletions, substitutions and adjacent transpositions (optimal string alignment).
// Past `limit` it stops early and returns some value above `limit`: a suggestion needs only to know
// which names are near.
std::size_t edit_distance(std::string_view a, std::string_view b, std::size_t limit = SIZE_MAX);

}  // namespace pstwin
