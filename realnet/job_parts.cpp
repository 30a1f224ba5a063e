#include "realnet/job_parts.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "core/digest.hpp"

namespace pstwin::realnet {
namespace {

// The order merge_parts takes parts in, as `pstwin run` starts the nodes.
int role_order(Role role) {
  switch (role) {
    case Role::kScheduler:
      return 0;
    case Role::kServer:
      return 1;
    case Role::kWorker:
      return 2;
    case Role::kValidator:
      return 3;
  }
  return 4;
}

// A node report is at most a few MB (its trace included); a bigger file is not one.
constexpr std::uintmax_t kMaxPartBytes = std::uintmax_t{1} << 30;

const std::string kOneJobFix = "merge one job's reports at a time: move the other job's out of the directory";

// The first line where two texts differ, for saying how two scenarios differ.
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream in_a(a), in_b(b);
  std::string line_a, line_b;
  for (int line = 1;; ++line) {
    const bool more_a = static_cast<bool>(std::getline(in_a, line_a));
    const bool more_b = static_cast<bool>(std::getline(in_b, line_b));
    if (!more_a && !more_b) return "";
    if (!more_a || !more_b || line_a != line_b)
      return "line " + std::to_string(line) + ": \"" + (more_b ? line_b : "") + "\" against \"" +
             (more_a ? line_a : "") + "\"";
  }
}

JobPart read_job_part(const std::filesystem::path& file) {
  const std::string fix = "; remove it from the directory, or rerun that node with --report " + file.string();
  std::error_code error;
  const auto size = std::filesystem::file_size(file, error);
  if (error) throw JobPartsError(file.string() + ": cannot read it (" + error.message() + ")" + fix);
  if (size > kMaxPartBytes)
    throw JobPartsError(file.string() + ": " + std::to_string(size) +
                        " bytes, too big for a node report (at most 1 GiB)" + fix);
  std::ifstream in(file);
  try {
    return {file, part_from_json(nlohmann::json::parse(in))};
  } catch (const std::exception& e) {
    throw JobPartsError(file.string() + ": not a node report (" + e.what() + ")" + fix);
  }
}

}  // namespace

std::string node_name(const NodePart& part) {
  std::string name(role_name(part.role));
  if (part.id == kNoNode) return name + " (never joined)";
  return name + " " + std::to_string(part.rank) + " (node " + std::to_string(part.id) + ")";
}

nlohmann::ordered_json part_to_json(const NodePart& p) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["role"] = std::string(role_name(p.role));
  j["rank"] = p.rank;
  j["id"] = p.id;
  j["address"] = p.address;
  j["scheduler"] = p.scheduler;
  j["completed"] = p.completed;
  j["failure"] = p.failure;
  if (p.crashed) j["crashed"] = true;
  if (p.faults) j["faults"] = faults_json(*p.faults);
  j["checked"] = p.checked;
  j["violation_count"] = p.violation_count;
  j["violations"] = ordered_json::array();
  for (const auto& v : p.violations)
    j["violations"].push_back({{"invariant", v.invariant}, {"detail", v.detail}});
  j["by_invariant"] = tallies_json(p.tallies);
  j["iterations"] = ordered_json::array();
  for (const auto& it : p.iterations)
    j["iterations"].push_back({{"index", it.index}, {"start_s", it.start_s}, {"end_s", it.end_s}});
  j["digests"] = ordered_json::object();
  for (const auto& [key, hex] : p.digests) j["digests"][std::to_string(key)] = hex;
  j["nodes"] = ordered_json::array();
  for (const auto& n : p.nodes) j["nodes"].push_back(node_info_json(n));
  j["bytes_sent"] = p.bytes_sent;
  j["bytes_received"] = p.bytes_received;
  j["cross_host"] = {{"bytes", p.cross_host.bytes}, {"push_pull_bytes", p.cross_host.push_pull_bytes}};
  j["messages"] = p.messages;
  j["epoch_s"] = p.epoch_s;
  j["trace"] = ordered_json::array();
  // A span: [thread, category, name, start, end], and [key, iteration, bytes] after it for a message
  // or a tagged step, then [worker, buffer] for a tagged step.
  for (const auto& s : p.trace) {
    ordered_json span = {s.thread, s.category, s.name, s.start_s, s.end_s};
    if (s.message) span.insert(span.end(), {s.message->key, s.message->iteration, s.message->bytes});
    if (s.message && (s.message->worker >= 0 || !s.message->buffer.empty()))
      span.insert(span.end(), {s.message->worker, s.message->buffer});
    j["trace"].push_back(std::move(span));
  }
  j["trace_dropped"] = p.trace_dropped;
  if (!p.refused.empty()) j["refused"] = p.refused;
  if (p.accuracy) j["accuracy"] = accuracy_json(*p.accuracy);
  if (p.balancing) j["balancing"] = balancing_json(*p.balancing);
  if (p.selection) j["selection"] = selection_json(*p.selection);
  if (p.validation) j["validation"] = validation_json(*p.validation);
  if (p.staleness) j["staleness"] = staleness_json(*p.staleness);
  j["scenario"] = p.scenario;
  return j;
}

NodePart part_from_json(const nlohmann::json& j) {
  NodePart p;
  const auto role = role_from_name(j.at("role").get<std::string>());
  if (!role) throw std::runtime_error("role: unknown role " + j.at("role").dump());
  p.role = *role;
  p.rank = j.at("rank");
  p.id = j.at("id");
  p.address = j.at("address").get<std::string>();
  p.scheduler = j.value("scheduler", std::string());
  p.completed = j.at("completed");
  p.failure = j.at("failure").get<std::string>();
  p.crashed = j.value("crashed", false);
  if (j.contains("faults")) p.faults = faults_from_json(nlohmann::ordered_json(j.at("faults")));
  p.checked = j.at("checked");
  p.violation_count = j.at("violation_count");
  for (const auto& v : j.at("violations")) p.violations.push_back({v.at("invariant"), v.at("detail")});
  add_tallies_from_json(j.at("by_invariant"), p.tallies);
  for (const auto& it : j.at("iterations"))
    p.iterations.push_back({it.at("index"), it.at("start_s"), it.at("end_s")});
  for (const auto& [key, hex] : j.at("digests").items()) p.digests[std::stoull(key)] = hex.get<std::string>();
  for (const auto& n : j.at("nodes")) p.nodes.push_back(node_info_from_json(n));
  p.bytes_sent = j.value("bytes_sent", std::uint64_t{0});
  p.bytes_received = j.value("bytes_received", std::uint64_t{0});
  if (j.contains("cross_host"))
    p.cross_host = {j.at("cross_host").at("bytes"), j.at("cross_host").at("push_pull_bytes")};
  p.messages = j.value("messages", std::uint64_t{0});
  p.epoch_s = j.value("epoch_s", 0.0);
  if (j.contains("trace"))
    for (const auto& s : j.at("trace")) {
      p.trace.push_back({"", 0, s.at(0).get<std::string>(), s.at(1).get<std::string>(),
                         s.at(2).get<std::string>(), s.at(3).get<double>(), s.at(4).get<double>(),
                         std::nullopt});
      if (s.size() >= 8)
        p.trace.back().message = TraceMessage{s.at(5).get<std::uint64_t>(), s.at(6).get<std::uint32_t>(),
                                              s.at(7).get<std::uint64_t>()};
      if (s.size() >= 10) {
        p.trace.back().message->worker = s.at(8).get<int>();
        p.trace.back().message->buffer = s.at(9).get<std::string>();
      }
    }
  p.trace_dropped = j.value("trace_dropped", std::uint64_t{0});
  if (j.contains("refused")) p.refused = j.at("refused").get<std::map<std::string, std::uint64_t>>();
  if (j.contains("accuracy")) p.accuracy = accuracy_from_json(j.at("accuracy"));
  if (j.contains("balancing")) p.balancing = balancing_from_json(j.at("balancing"));
  if (j.contains("selection")) p.selection = selection_from_json(j.at("selection"));
  if (j.contains("validation")) p.validation = validation_from_json(j.at("validation"));
  if (j.contains("staleness")) p.staleness = staleness_from_json(j.at("staleness"));
  p.scenario = j.value("scenario", std::string());
  return p;
}

RunReport merge_parts(const Scenario& sc, const std::vector<NodePart>& parts, const std::string& failure) {
  RunReport report;
  report.scenario = sc.name;
  report.backend = "real";
  report.seed = sc.seed;
  report.lb_chosen = sc.lb_chosen;
  std::map<std::uint32_t, double> slowest;
  std::map<std::uint64_t, std::string> digests;
  std::ostringstream failures;
  if (!failure.empty()) failures << failure;
  for (const auto& part : parts) {
    const std::string name = node_name(part);
    if (part.faults) {
      if (!report.faults) report.faults.emplace();
      report.faults->resend_enabled = part.faults->resend_enabled;
      add_fault_counts(*report.faults, *part.faults);
      // The scheduler declared them; every node heard it.
      if (report.faults->lost_workers.size() < part.faults->lost_workers.size())
        report.faults->lost_workers = part.faults->lost_workers;
    }
    // A node crashed by faults.crashes is the fault, not the job's failure: the scheduler declares it
    // dead, and the job then fails naming it or goes on without it (ps.on_worker_loss).
    if (part.crashed) continue;
    if (!part.completed && failure.empty())
      failures << (failures.tellp() > 0 ? "; " : "") << name << ": " << part.failure;
    report.invariants_checked += part.checked;
    report.violation_count += part.violation_count;
    for (const auto& v : part.violations) report.violations.push_back({v.invariant, name + ": " + v.detail});
    add_tallies(part.tallies, report.invariant_tallies);
    for (const auto& it : part.iterations) {
      auto& s = slowest[it.index];
      s = std::max(s, it.end_s - it.start_s);
    }
    for (const auto& [key, hex] : part.digests) digests[key] = hex;
    if (part.role == Role::kScheduler) report.nodes = part.nodes;
    if (part.accuracy) report.accuracy = part.accuracy;     // worker 0's
    if (part.balancing) report.balancing = part.balancing;  // the scheduler's
    if (part.selection) {                                   // each server judged its own keys
      if (!report.selection) report.selection.emplace();
      add_selection(*report.selection, *part.selection);
    }
    if (part.validation) {  // two validators judge disjoint sets of workers
      if (!report.validation) report.validation.emplace();
      add_validation(*report.validation, *part.validation);
    }
    if (part.staleness) {  // each server (or aggregator) counted its own keys' pushes
      if (!report.staleness) report.staleness.emplace();
      add_staleness(*report.staleness, *part.staleness);
    }
    if (!part.refused.empty()) report.refused[name] = part.refused;
    report.messages += part.messages;
    report.message_bytes += part.bytes_sent;
    report.cross_host += part.cross_host;
    report.trace_dropped += part.trace_dropped;
  }
  // One trace: a process per node in part order, times shifted from each node's clock to the earliest.
  double base = 0;
  for (const auto& part : parts) base = base == 0 ? part.epoch_s : std::min(base, part.epoch_s);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto& part = parts[i];
    const std::string label =
        std::string(role_name(part.role)) +
        (part.role != Role::kScheduler && part.rank >= 0 ? " " + std::to_string(part.rank) : "");
    const double shift = part.epoch_s - base;
    for (const auto& s : part.trace)
      report.trace.push_back({label, static_cast<int>(i), s.thread, s.category, s.name, s.start_s + shift,
                              s.end_s + shift, s.message});
  }
  for (const auto& [index, seconds] : slowest)
    report.iterations.push_back({static_cast<int>(index), seconds});
  if (report.balancing) {  // as RunRecorder::fill: the iterations that ran a balanced decision
    auto& b = *report.balancing;
    double sum = 0;
    b.balanced_iterations = 0;
    for (const auto& d : b.decisions)
      if (const auto it = slowest.find(d.iteration); !d.probe && it != slowest.end()) {
        sum += it->second;
        ++b.balanced_iterations;
      }
    b.balanced_mean_s = b.balanced_iterations > 0 ? sum / b.balanced_iterations : 0;
  }
  // Exactly RunRecorder::fill.
  Digest digest;
  for (const auto& [key, hex] : digests) {
    digest.update_u64(key);
    digest.update(std::as_bytes(std::span(hex.data(), hex.size())));
  }
  report.model_digest = digests.empty() ? "" : digest.hex();
  report.failure = failures.str();
  report.completed = report.failure.empty();
  if (!report.completed) {
    report.violations.push_back({"run", report.failure});
    ++report.violation_count;
    ++report.invariant_tallies["run"].violated;
  }
  report.replay = replay_command(sc, std::nullopt, "run");
  return report;
}

std::string part_file_name(const NodePart& part, int pid) {
  const std::string role(role_name(part.role));
  if (part.role == Role::kScheduler) return role + ".json";
  if (part.id == kNoNode) return role + "-pid" + std::to_string(pid) + ".json";
  return role + std::to_string(part.rank) + ".json";
}

std::vector<JobPart> read_job_parts(const std::filesystem::path& dir) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error))
    throw JobPartsError(dir.string() +
                        ": not a directory; give the directory the nodes wrote their --report files to");
  std::vector<JobPart> parts;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    if (entry.path().extension() != ".json" || name == "results.json" || name == "trace.json") continue;
    parts.push_back(read_job_part(entry.path()));
  }
  if (parts.empty())
    throw JobPartsError(dir.string() +
                        ": no node reports (*.json) in it; start every node with `pstwin node "
                        "--report " +
                        (dir / "").string() + "` (or --report FILE.json there)");
  std::ranges::sort(parts, [](const JobPart& a, const JobPart& b) {
    const auto key = [](const JobPart& p) {
      return std::tuple(role_order(p.part.role), p.part.rank, p.file);
    };
    return key(a) < key(b);
  });
  // Two reports of one node: the same id, or the same role and rank.
  std::map<NodeId, const JobPart*> by_id;
  std::map<std::pair<int, int>, const JobPart*> by_rank;
  for (const auto& p : parts) {
    if (p.part.id == kNoNode) continue;
    const JobPart* seen = nullptr;
    if (const auto [it, fresh] = by_id.try_emplace(p.part.id, &p); !fresh) seen = it->second;
    if (const auto [it, fresh] = by_rank.try_emplace({role_order(p.part.role), p.part.rank}, &p); !fresh)
      seen = it->second;
    if (seen != nullptr)
      throw JobPartsError(p.file.string() + ": " + node_name(p.part) + ", and " + seen->file.string() + ": " +
                          node_name(seen->part) +
                          ": two reports of one node; remove the stale one (an "
                          "earlier job's) from the directory");
  }
  // Every part of one job: the scheduler's part (first when there is one) is the reference.
  const JobPart& reference = parts.front();
  for (const auto& p : parts) {
    if (p.part.scheduler != reference.part.scheduler)
      throw JobPartsError(p.file.string() + ": a report of another job: its scheduler is \"" +
                          p.part.scheduler + "\", " + reference.file.string() + "'s is \"" +
                          reference.part.scheduler + "\"; " + kOneJobFix);
    if (p.part.scenario != reference.part.scenario)
      throw JobPartsError(p.file.string() + ": a report of another job: its scenario differs from " +
                          reference.file.string() + "'s at " +
                          first_difference(reference.part.scenario, p.part.scenario) + "; " + kOneJobFix);
  }
  if (reference.part.role == Role::kScheduler && !reference.part.nodes.empty())
    for (const auto& p : parts) {
      if (p.part.role == Role::kScheduler || p.part.id == kNoNode) continue;
      const auto listed = std::ranges::find(reference.part.nodes, p.part.id, &NodeInfo::id);
      if (listed == reference.part.nodes.end() || listed->address != p.part.address)
        throw JobPartsError(
            p.file.string() + ": a report of another job: " + node_name(p.part) + " at " + p.part.address +
            " is not in the node table of " + reference.file.string() +
            (listed == reference.part.nodes.end()
                 ? std::string(" (no such node id)")
                 : " (node " + std::to_string(p.part.id) + " is " + listed->address + " there)") +
            "; " + kOneJobFix);
    }
  return parts;
}

std::vector<std::string> missing_nodes(const Scenario& sc, const std::vector<NodePart>& parts) {
  std::set<std::pair<Role, int>> present;
  for (const auto& part : parts) present.insert({part.role, part.role == Role::kScheduler ? 0 : part.rank});
  std::vector<std::string> missing;
  if (!present.contains({Role::kScheduler, 0})) missing.emplace_back("scheduler");
  const std::pair<Role, int> counts[] = {{Role::kServer, sc.roles.servers},
                                         {Role::kWorker, sc.roles.workers},
                                         {Role::kValidator, sc.roles.validators}};
  for (const auto& [role, count] : counts)
    for (int rank = 0; rank < count; ++rank)
      if (!present.contains({role, rank}))
        missing.push_back(std::string(role_name(role)) + " " + std::to_string(rank));
  return missing;
}

}  // namespace pstwin::realnet
