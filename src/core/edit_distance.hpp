// Edit distance for "did you mean" suggestions (scenario fields, environment variables).
#pragma once

#include <cstddef>
#include <string_view>

namespace pstwin {

// Insertions, deletions, substitutions and adjacent transpositions (optimal string alignment).
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace pstwin
