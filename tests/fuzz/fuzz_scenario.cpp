// libFuzzer target: scenario text (TOML) to a validated Scenario, as `pstwin check` reads a file.
// Input: TOML text, optionally followed by a line "#--set FIELD=VALUE" per override, as the command
// line gives them. A bad scenario must be a ScenarioError (exit 2), never a crash, an abort or an
// allocation the size of a hostile number; a scenario that loads must load again from its resolved
// TOML to the same resolved TOML.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "scenario/resources.hpp"
#include "scenario/scenario.hpp"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string_view text = input;
  std::vector<std::pair<std::string, std::string>> overrides;
  constexpr std::string_view kSet = "\n#--set ";
  if (const auto at = input.find(kSet); at != std::string_view::npos) {
    text = input.substr(0, at);
    std::string_view rest = input.substr(at);
    while (rest.starts_with(kSet)) {
      rest.remove_prefix(kSet.size());
      const auto end = rest.find('\n');
      const std::string_view line = rest.substr(0, end);
      rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
      const auto eq = line.find('=');
      if (eq == std::string_view::npos || eq == 0) return 0;
      overrides.emplace_back(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
    }
  }
  pstwin::Scenario scenario;
  try {
    scenario = pstwin::parse_scenario(text, "fuzz.toml", overrides);
  } catch (const pstwin::ScenarioError&) {
    return 0;
  }
  (void)pstwin::estimate_resources(scenario);
  const std::string resolved = pstwin::resolved_toml(scenario);
  std::string again;
  try {
    again = pstwin::resolved_toml(pstwin::parse_scenario(resolved, "resolved.toml"));
  } catch (const pstwin::ScenarioError&) {
    require(false);  // what pstwin writes as resolved.toml must load
  }
  require(again == resolved);
  return 0;
}
