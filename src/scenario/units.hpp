// Reading and writing quantities with units, as they appear in scenario files:
// sizes ("4MB", "4MiB", bytes), bandwidths ("10Gbps", "1.25GBps", "1GiBps", bytes/s),
// durations ("5us", "2ms", "1.5s", seconds) and compute speeds ("100Gf", flops).
// Parsing is exact where it can be: the decimal text is scaled by its power of ten before it is
// rounded to a double, so "5us" reads as the same double as the literal 5e-6.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pstwin::units {

enum class Quantity { kSize, kBandwidth, kDuration, kFlops };

enum class ParseStatus {
  kOk,
  kSyntax,      // not a number followed by a known unit
  kNegative,    // a negative number
  kNotWhole,    // sizes only: a fraction of a byte
  kOutOfRange,  // too large to represent (or a non-finite number)
};

template <typename T>
struct ParseResult {
  ParseStatus status = ParseStatus::kSyntax;
  T value{};
};

struct Unit {
  std::string_view suffix;
  int exp10;  // value = number * 10^exp10 * 2^exp2
  int exp2;
  bool canonical;  // false: accepted when reading, never written ("kB" next to "KB")
};

// The units of a quantity, in the order ties are broken when writing.
std::span<const Unit> units_of(Quantity quantity);

// "10Gbps" -> 1.25e9. A number without a unit is in the base unit (B/s, s, flops; bytes for sizes).
ParseResult<double> parse_real(Quantity quantity, std::string_view text);
ParseResult<std::uint64_t> parse_size(std::string_view text);

// TOML value text for a quantity: a quoted human string when one is exact and short ("\"10Gbps\"",
// "\"5us\"", "\"4MB\""), 0 as a plain 0, otherwise a plain number ("0.3333333333333333").
// Reading it back always gives exactly the same value.
std::string format_real(Quantity quantity, double value);
std::string format_size(std::uint64_t bytes);

// Shortest text that reads back as exactly `value`, valid as a TOML number ("0.97", "1e-05", "4").
std::string format_number(double value);

}  // namespace pstwin::units
