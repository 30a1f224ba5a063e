// What rule and attack configs share: name <-> enum tables (one error listing every choice) and field
// checks (one error naming the field, its value and the fix).
#pragma once

#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace pstwin::zeno {

template <typename Kind>
struct Named {
  Kind kind;
  std::string_view name;
};

// Throws std::invalid_argument: "unknown <what> '<name>': choose one of a, b, c".
template <typename Kind>
Kind parse_in(std::span<const Named<Kind>> table, std::string_view name, std::string_view what) {
  std::string choices;
  for (const auto& entry : table) {
    if (entry.name == name) return entry.kind;
    choices += (choices.empty() ? "" : ", ") + std::string(entry.name);
  }
  throw std::invalid_argument("unknown " + std::string(what) + " '" + std::string(name) +
                              "': choose one of " + choices);
}

// Throws std::invalid_argument "<field> = <value> is invalid: <fix>" unless `ok`.
inline void require_field(bool ok, std::string_view field, double value, std::string_view fix) {
  if (ok) return;
  std::ostringstream out;
  out << field << " = " << value << " is invalid: " << fix;
  throw std::invalid_argument(out.str());
}

}  // namespace pstwin::zeno
