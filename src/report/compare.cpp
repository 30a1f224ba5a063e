#include "report/compare.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace pstwin {
namespace {

std::string cell(std::optional<double> value, const char* format) {
  if (!value) return "-";
  char text[64];
  std::snprintf(text, sizeof text, format, *value);
  return text;
}

std::string error_cell(const CompareRow& row) {
  const auto e = row.relative_error();
  if (!e) return "-";
  char text[32];
  std::snprintf(text, sizeof text, "%+.1f %%", *e * 100);
  return text;
}

void table(std::ostringstream& out, const std::string& title, const std::string& unit,
           const std::vector<CompareRow>& rows, const char* format) {
  if (rows.empty()) return;
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %16s %16s %10s\n", (title + " (" + unit + ")").c_str(), "sim",
                "real", "error");
  out << line;
  for (const auto& row : rows) {
    std::snprintf(line, sizeof line, "  %-22s %16s %16s %10s\n", row.name.c_str(),
                  cell(row.sim, format).c_str(), cell(row.real, format).c_str(), error_cell(row).c_str());
    out << line;
  }
}

}  // namespace

std::optional<double> CompareRow::relative_error() const {
  if (!sim || !real || *real == 0) return std::nullopt;
  return (*sim - *real) / *real;
}

Comparison compare_reports(const RunReport& sim, const RunReport& real) {
  Comparison c;
  c.scenario = sim.scenario;
  if (sim.scenario != real.scenario)
    c.notes.push_back("different scenarios: sim ran \"" + sim.scenario + "\", real ran \"" + real.scenario +
                      "\"");
  if (sim.backend != "sim")
    c.notes.push_back("SIM_DIR holds a \"" + sim.backend + "\" run, not a simulation");
  if (real.backend != "real")
    c.notes.push_back("REAL_DIR holds a \"" + real.backend + "\" run, not a real one");
  for (const auto* r : {&sim, &real})
    if (!r->completed) c.notes.push_back(r->backend + " run did not complete: " + r->failure);
  auto mean = [](const RunReport& r) {
    return r.iterations.empty() ? std::nullopt : std::optional<double>(r.mean_iteration_s());
  };
  c.mean_iteration = {"mean", mean(sim), mean(real)};

  std::map<int, CompareRow> iterations;
  for (const auto& it : sim.iterations) iterations[it.index].sim = it.time_s;
  for (const auto& it : real.iterations) iterations[it.index].real = it.time_s;
  for (auto& [index, row] : iterations) {
    row.name = "iteration " + std::to_string(index);
    c.iterations.push_back(row);
  }
  if (sim.iterations.size() != real.iterations.size())
    c.notes.push_back("iteration counts differ: sim " + std::to_string(sim.iterations.size()) + ", real " +
                      std::to_string(real.iterations.size()));

  // Paired by name in the sim's order, then links only the real run has.
  std::map<std::string, const LinkUsage*> real_links;
  for (const auto& l : real.links) real_links[l.name] = &l;
  auto add_link = [&](const std::string& name, const LinkUsage* s, const LinkUsage* r) {
    auto bytes = [](const LinkUsage* l) {
      return l ? std::optional<double>(static_cast<double>(l->bytes)) : std::nullopt;
    };
    auto util = [](const LinkUsage* l) { return l ? l->utilization : std::nullopt; };
    c.link_bytes.push_back({name, bytes(s), bytes(r)});
    c.link_utilization.push_back({name, util(s), util(r)});
  };
  for (const auto& l : sim.links) {
    const auto it = real_links.find(l.name);
    add_link(l.name, &l, it == real_links.end() ? nullptr : it->second);
    if (it != real_links.end()) real_links.erase(it);
  }
  for (const auto& [name, l] : real_links) add_link(name, nullptr, l);
  if (real.links.empty() && !sim.links.empty())
    c.notes.push_back("the real run has no link counters: `pstwin run --netns` measures every host link");
  if (real.emulation && !real.emulation->latency_emulated)
    c.notes.push_back("link latency was not emulated in the real run (" + real.emulation->method +
                      "): small messages see the machine's latency, not the scenario's");
  if (real.backend == "real" && !real.emulation)
    c.notes.push_back(
        "the real run was on loopback (no --netns): no link was shaped, and its links are the "
        "message bytes each host's nodes sent (.up) and received (.down)");
  if (real.emulation && !real.links.empty())
    c.notes.push_back("real link bytes are Ethernet frames (TCP/IP headers, ACKs); sim bytes are messages");
  return c;
}

std::string comparison_text(const Comparison& c) {
  std::ostringstream out;
  out << "scenario " << c.scenario << ": sim vs real (error = (sim - real) / real)\n";
  table(out, "iteration time", "s", {c.mean_iteration}, "%.6f");
  table(out, "per iteration", "s", c.iterations, "%.6f");
  table(out, "link bytes", "B", c.link_bytes, "%.0f");
  table(out, "link utilisation", "0-1", c.link_utilization, "%.4f");
  for (const auto& note : c.notes) out << "note: " << note << "\n";
  return out.str();
}

RunReport load_results(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "results.json";
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error(path.string() +
                             ": cannot be read; give the --out directory of a `pstwin sim` or "
                             "`pstwin run`");
  try {
    return report_from_json(nlohmann::ordered_json::parse(in));
  } catch (const std::exception& e) {
    throw std::runtime_error(path.string() + ": not a pstwin results.json (" + e.what() + ")");
  }
}

}  // namespace pstwin
