#include "scenario/units.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <system_error>
#include <tuple>

namespace pstwin::units {
namespace {

constexpr std::array kSizeUnits{
    Unit{"B", 0, 0, true},    Unit{"KB", 3, 0, true},   Unit{"kB", 3, 0, false},  Unit{"MB", 6, 0, true},
    Unit{"GB", 9, 0, true},   Unit{"TB", 12, 0, true},  Unit{"KiB", 0, 10, true}, Unit{"MiB", 0, 20, true},
    Unit{"GiB", 0, 30, true}, Unit{"TiB", 0, 40, true}, Unit{"", 0, 0, false},
};

// Bits per second are bytes per second times 2^-3.
constexpr std::array kBandwidthUnits{
    Unit{"Bps", 0, 0, true},    Unit{"KBps", 3, 0, true},   Unit{"kBps", 3, 0, false},
    Unit{"MBps", 6, 0, true},   Unit{"GBps", 9, 0, true},   Unit{"TBps", 12, 0, true},
    Unit{"bps", 0, -3, true},   Unit{"Kbps", 3, -3, true},  Unit{"kbps", 3, -3, false},
    Unit{"Mbps", 6, -3, true},  Unit{"Gbps", 9, -3, true},  Unit{"Tbps", 12, -3, true},
    Unit{"KiBps", 0, 10, true}, Unit{"MiBps", 0, 20, true}, Unit{"GiBps", 0, 30, true},
    Unit{"TiBps", 0, 40, true}, Unit{"", 0, 0, false},
};

constexpr std::array kDurationUnits{
    Unit{"s", 0, 0, true},   Unit{"ms", -3, 0, true}, Unit{"us", -6, 0, true},
    Unit{"ns", -9, 0, true}, Unit{"", 0, 0, false},
};

constexpr std::array kFlopsUnits{
    Unit{"f", 0, 0, true},  Unit{"kf", 3, 0, true},  Unit{"Kf", 3, 0, false}, Unit{"Mf", 6, 0, true},
    Unit{"Gf", 9, 0, true}, Unit{"Tf", 12, 0, true}, Unit{"Pf", 15, 0, true}, Unit{"", 0, 0, false},
};

// A unit form with more significant digits or longer text than this is no easier to read than a
// plain number ("333.3333333333333ms"): write the plain number instead.
constexpr std::size_t kMaxHumanDigits = 8;
constexpr std::size_t kMaxHumanLength = 24;

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// A decimal number as significant digits (no leading or trailing zeros; empty for zero) times 10^exp.
struct Decimal {
  bool negative = false;
  std::string digits;
  long exp = 0;
};

void normalize(Decimal& d) {
  const auto first = d.digits.find_first_not_of('0');
  if (first == std::string::npos) {
    d.digits.clear();
    d.exp = 0;
    return;
  }
  d.digits.erase(0, first);
  const auto last = d.digits.find_last_not_of('0');
  d.exp += static_cast<long>(d.digits.size() - last - 1);
  d.digits.erase(last + 1);
}

// Splits "1.5e3 ms" into the number and the unit suffix; nullopt if it does not start with a number.
std::optional<std::pair<Decimal, std::string_view>> scan(std::string_view text) {
  text = trim(text);
  Decimal d;
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) d.negative = text[i++] == '-';
  std::size_t mantissa_digits = 0;
  while (i < text.size() && is_digit(text[i])) {
    d.digits += text[i++];
    ++mantissa_digits;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && is_digit(text[i])) {
      d.digits += text[i++];
      ++mantissa_digits;
      --d.exp;
    }
  }
  if (mantissa_digits == 0) return std::nullopt;
  // An exponent only counts when digits follow; no unit starts with 'e'.
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    std::size_t j = i + 1;
    bool exp_negative = false;
    if (j < text.size() && (text[j] == '-' || text[j] == '+')) exp_negative = text[j++] == '-';
    if (j < text.size() && is_digit(text[j])) {
      long e = 0;
      while (j < text.size() && is_digit(text[j])) {
        e = std::min(e * 10 + (text[j++] - '0'), 1'000'000L);  // saturate: far out of range anyway
      }
      d.exp += exp_negative ? -e : e;
      i = j;
    }
  }
  normalize(d);
  return std::pair{d, trim(text.substr(i))};
}

const Unit* find_unit(Quantity quantity, std::string_view suffix) {
  for (const Unit& unit : units_of(quantity)) {
    if (unit.suffix == suffix) return &unit;
  }
  return nullptr;
}

// Correctly rounded digits * 10^exp (from_chars rounds the exact decimal value).
std::optional<double> to_double(const std::string& digits, long exp) {
  if (digits.empty()) return 0.0;
  const std::string text = digits + "e" + std::to_string(exp);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// The shortest decimal that reads back as `value` (> 0, finite).
Decimal shortest_decimal(double value) {
  std::array<char, 64> buf{};
  const auto result =
      std::to_chars(buf.data(), buf.data() + buf.size(), value, std::chars_format::scientific);
  const std::string_view text(buf.data(), static_cast<std::size_t>(result.ptr - buf.data()));
  const auto e_pos = text.find('e');
  Decimal d;
  for (char c : text.substr(0, e_pos)) {
    if (is_digit(c)) d.digits += c;
  }
  int exponent = 0;
  std::string_view exp_text = text.substr(e_pos + 1);
  if (!exp_text.empty() && exp_text.front() == '+') exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);
  d.exp = exponent - static_cast<long>(d.digits.size() - 1);
  normalize(d);
  return d;
}

Decimal integer_decimal(std::uint64_t value) {
  Decimal d;
  d.digits = std::to_string(value);
  normalize(d);
  return d;
}

// Positional text of digits * 10^exp, no exponent: "125", "0.005", "4096000".
std::string render(const std::string& digits, long exp) {
  if (digits.empty()) return "0";
  if (exp >= 0) return digits + std::string(static_cast<std::size_t>(exp), '0');
  const long point = static_cast<long>(digits.size()) + exp;
  if (point > 0) {
    return digits.substr(0, static_cast<std::size_t>(point)) + "." +
           digits.substr(static_cast<std::size_t>(point));
  }
  return "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
}

// Among candidate texts, prefer no "0." mantissa, then the shortest, then the earliest unit.
struct Best {
  std::string text;
  std::tuple<bool, std::size_t, std::size_t> key{true, std::numeric_limits<std::size_t>::max(), 0};

  void offer(std::string candidate, std::size_t order) {
    const std::tuple key_of{candidate.starts_with("0."), candidate.size(), order};
    if (key_of < key) {
      key = key_of;
      text = std::move(candidate);
    }
  }
};

std::string quote(std::string_view text) {
  return "\"" + std::string(text) + "\"";
}

}  // namespace

std::span<const Unit> units_of(Quantity quantity) {
  switch (quantity) {
    case Quantity::kSize:
      return kSizeUnits;
    case Quantity::kBandwidth:
      return kBandwidthUnits;
    case Quantity::kDuration:
      return kDurationUnits;
    case Quantity::kFlops:
      return kFlopsUnits;
  }
  return {};
}

ParseResult<double> parse_real(Quantity quantity, std::string_view text) {
  const auto scanned = scan(text);
  if (!scanned) return {ParseStatus::kSyntax, 0};
  const auto& [number, suffix] = *scanned;
  const Unit* unit = find_unit(quantity, suffix);
  if (unit == nullptr) return {ParseStatus::kSyntax, 0};
  const auto scaled = to_double(number.digits, number.exp + unit->exp10);
  if (!scaled) return {ParseStatus::kOutOfRange, 0};
  const double value = std::ldexp(*scaled, unit->exp2);  // exact: a power of two
  if (!std::isfinite(value)) return {ParseStatus::kOutOfRange, 0};
  if (number.negative && value != 0) return {ParseStatus::kNegative, -value};
  return {ParseStatus::kOk, value};
}

ParseResult<std::uint64_t> parse_size(std::string_view text) {
  const auto scanned = scan(text);
  if (!scanned) return {ParseStatus::kSyntax, 0};
  const auto& [number, suffix] = *scanned;
  const Unit* unit = find_unit(Quantity::kSize, suffix);
  if (unit == nullptr) return {ParseStatus::kSyntax, 0};
  if (number.digits.empty()) return {ParseStatus::kOk, 0};
  if (number.negative) return {ParseStatus::kNegative, 0};

  // Exact integer arithmetic: digits * 10^exp10 * 2^exp2 must be a whole number of bytes.
  std::uint64_t value = 0;
  for (char c : number.digits) {
    if (__builtin_mul_overflow(value, std::uint64_t{10}, &value) ||
        __builtin_add_overflow(value, static_cast<std::uint64_t>(c - '0'), &value)) {
      return {ParseStatus::kOutOfRange, 0};
    }
  }
  long exp10 = number.exp + unit->exp10;
  int exp2 = unit->exp2;
  for (; exp10 < 0; ++exp10) {  // divide by 10 = one factor 5 and one factor 2
    if (value % 5 != 0) return {ParseStatus::kNotWhole, 0};
    value /= 5;
    if (exp2 > 0) {
      --exp2;
    } else if (value % 2 == 0) {
      value /= 2;
    } else {
      return {ParseStatus::kNotWhole, 0};
    }
  }
  for (; exp10 > 0; --exp10) {
    if (__builtin_mul_overflow(value, std::uint64_t{10}, &value)) return {ParseStatus::kOutOfRange, 0};
  }
  if (exp2 > 0) {
    if (exp2 >= 64 || value > (std::numeric_limits<std::uint64_t>::max() >> exp2)) {
      return {ParseStatus::kOutOfRange, 0};
    }
    value <<= exp2;
  }
  return {ParseStatus::kOk, value};
}

std::string format_real(Quantity quantity, double value) {
  if (value == 0) return "0";
  if (!std::isfinite(value) || value < 0) return format_number(value);
  Best best;
  std::size_t order = 0;
  for (const Unit& unit : units_of(quantity)) {
    ++order;
    if (!unit.canonical) continue;
    const double mantissa = std::ldexp(value, -unit.exp2);
    if (mantissa == 0 || !std::isfinite(mantissa) || std::ldexp(mantissa, unit.exp2) != value) continue;
    const Decimal d = shortest_decimal(mantissa);
    if (d.digits.size() > kMaxHumanDigits) continue;
    std::string text = render(d.digits, d.exp - unit.exp10) + std::string(unit.suffix);
    const auto back = parse_real(quantity, text);
    if (back.status == ParseStatus::kOk && back.value == value) best.offer(std::move(text), order);
  }
  if (best.text.empty() || best.text.size() > kMaxHumanLength) return format_number(value);
  return quote(best.text);
}

std::string format_size(std::uint64_t bytes) {
  if (bytes == 0) return "0";
  Best best;
  std::size_t order = 0;
  for (const Unit& unit : units_of(Quantity::kSize)) {
    ++order;
    if (!unit.canonical) continue;
    // Binary units only when they divide exactly: "1536B" rather than "1.5KiB".
    if (unit.exp2 > 0 && bytes % (std::uint64_t{1} << unit.exp2) != 0) continue;
    const Decimal d = integer_decimal(bytes >> unit.exp2);
    if (d.digits.size() > kMaxHumanDigits) continue;
    best.offer(render(d.digits, d.exp - unit.exp10) + std::string(unit.suffix), order);
  }
  if (best.text.empty()) {
    // Plain bytes; beyond TOML's integers (2^63 - 1) as a string.
    const std::string digits = std::to_string(bytes);
    return bytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ? quote(digits + "B")
                                                                                        : digits;
  }
  return quote(best.text);
}

std::string format_number(double value) {
  std::array<char, 64> buf{};
  const auto result = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  std::string text(buf.data(), result.ptr);
  // Long digit strings would read as (overflowing) TOML integers; make them floats.
  const bool all_digits =
      std::all_of(text.begin(), text.end(), [](char c) { return is_digit(c) || c == '-'; });
  if (all_digits && text.size() > 15) text += ".0";
  return text;
}

}  // namespace pstwin::units
