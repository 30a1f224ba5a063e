#include "report/run_report.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <type_traits>

#include "ps/ids.hpp"

namespace pstwin {
namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace

std::string shell_quote(const std::string& text) {
  const bool plain = !text.empty() && text.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_-+./=:,@%") == std::string::npos;
  if (plain) return text;
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

double RunReport::mean_iteration_s() const {
  if (iterations.empty()) return 0;
  double total = 0;
  for (const auto& it : iterations) total += it.time_s;
  return total / static_cast<double>(iterations.size());
}

std::string replay_command(const Scenario& scenario, std::optional<std::uint64_t> seed,
                           std::string_view subcommand) {
  std::string command = "pstwin " + std::string(subcommand) + " " +
                        shell_quote(scenario.source_path.empty() ? "SCENARIO" : scenario.source_path);
  if (seed) command += " --seed " + std::to_string(*seed);
  for (const auto& [field, value] : scenario.overrides)
    command += " --set " + shell_quote(field + "=" + value);
  return command;
}

nlohmann::ordered_json node_info_json(const NodeInfo& n) {
  return {{"id", n.id},
          {"role", std::string(role_name(n.role))},
          {"rank", n.rank},
          {"address", n.address},
          {"host", n.host}};
}

nlohmann::ordered_json tallies_json(const InvariantTallies& tallies) {
  auto j = nlohmann::ordered_json::object();
  for (const auto& [name, t] : tallies) j[name] = {{"checked", t.checked}, {"violated", t.violated}};
  return j;
}

void add_tallies_from_json(const nlohmann::json& json, InvariantTallies& into) {
  for (const auto& [name, t] : json.items()) {
    auto& tally = into[name];
    tally.checked += t.at("checked").get<std::uint64_t>();
    tally.violated += t.at("violated").get<std::uint64_t>();
  }
}

nlohmann::ordered_json to_json(const RunReport& r) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["scenario"] = r.scenario;
  j["backend"] = r.backend;
  if (!r.van.empty()) j["van"] = r.van;
  j["seed"] = r.seed;
  j["completed"] = r.completed;
  j["failure"] = r.failure;
  j["iterations"] = ordered_json::array();
  for (const auto& it : r.iterations) j["iterations"].push_back({{"index", it.index}, {"time_s", it.time_s}});
  j["mean_iteration_s"] = r.mean_iteration_s();
  ordered_json inv;
  inv["checked"] = r.invariants_checked;
  inv["violation_count"] = r.violation_count;
  inv["violations"] = ordered_json::array();
  for (const auto& v : r.violations) {
    ordered_json violation = {{"invariant", v.invariant}, {"detail", v.detail}, {"replay", r.replay}};
    if (v.time_s) violation["time_s"] = *v.time_s;
    if (v.node != kNoNode) violation["node"] = v.node;
    inv["violations"].push_back(std::move(violation));
  }
  inv["by_invariant"] = tallies_json(r.invariant_tallies);
  j["invariants"] = inv;
  j["links"] = ordered_json::array();
  for (const auto& l : r.links) {
    ordered_json link = {{"name", l.name}, {"bytes", l.bytes}};
    if (l.bandwidth_Bps) link["bandwidth_Bps"] = *l.bandwidth_Bps;
    if (l.utilization) link["utilization"] = *l.utilization;
    if (l.phase_utilization) link["phase_utilization"] = *l.phase_utilization;
    if (l.drops) link["drops"] = *l.drops;
    if (l.retransmitted) link["retransmitted"] = *l.retransmitted;
    if (!l.over_time.empty()) {
      ordered_json values = ordered_json::array();
      for (const double u : l.over_time) values.push_back(std::round(u * 1e4) / 1e4);
      link["over_time"] = {{"width_s", l.over_time_width_s}, {"utilization", std::move(values)}};
    }
    j["links"].push_back(std::move(link));
  }
  if (r.emulation)
    j["network_emulation"] = {{"method", r.emulation->method},
                              {"latency_emulated", r.emulation->latency_emulated},
                              {"note", r.emulation->note}};
  j["model_digest"] = r.model_digest;
  if (r.accuracy) j["accuracy"] = accuracy_json(*r.accuracy);
  if (r.selection) j["selection"] = selection_json(*r.selection);
  if (r.validation) j["validation"] = validation_json(*r.validation);
  if (r.late_pushes) j["late_pushes"] = *r.late_pushes;
  if (!r.refused.empty()) j["refused"] = r.refused;
  if (r.staleness) j["staleness"] = staleness_json(*r.staleness);
  if (r.bound)
    j["bound"] = {
        {"time_s", r.bound->time_s}, {"achieved_s", r.bound->achieved_s}, {"formula", r.bound->formula}};
  else
    j["bound"] = nullptr;
  if (r.balancing) j["balancing"] = balancing_json(*r.balancing);
  if (r.lb_chosen) j["lb"] = {{"chosen", lb_choice_json(*r.lb_chosen)}};
  if (r.faults) j["faults"] = faults_json(*r.faults);
  if (r.breakdown) j["breakdown"] = breakdown_json(*r.breakdown);
  j["nodes"] = ordered_json::array();
  for (const auto& n : r.nodes) j["nodes"].push_back(node_info_json(n));
  j["run_time_s"] = r.run_time_s;
  j["messages"] = r.messages;
  j["message_bytes"] = r.message_bytes;
  j["cross_host"] = {{"bytes", r.cross_host.bytes}, {"push_pull_bytes", r.cross_host.push_pull_bytes}};
  j["replay"] = r.replay;
  j["trace_dropped"] = r.trace_dropped;
  j["wall_s"] = r.wall_s;
  return j;
}

nlohmann::ordered_json breakdown_json(const TimeBreakdown& b) {
  nlohmann::ordered_json j;
  j["summary"] = b.largest;
  j["workers"] = nlohmann::ordered_json::array();
  for (const auto& w : b.workers)
    j["workers"].push_back({{"worker", w.worker},
                            {"iteration", w.iteration},
                            {"compute_s", w.compute_s},
                            {"push_s", w.push_s},
                            {"credit_wait_s", w.credit_wait_s},
                            {"copy_s", w.copy_s},
                            {"pull_s", w.pull_s},
                            {"aggregate_wait_s", w.aggregate_wait_s}});
  j["servers"] = nlohmann::ordered_json::array();
  for (const auto& s : b.servers)
    j["servers"].push_back({{"server", s.server},
                            {"aggregate_s", s.aggregate_s},
                            {"receive_s", s.receive_s},
                            {"send_s", s.send_s},
                            {"idle_s", s.idle_s}});
  return j;
}

nlohmann::ordered_json lb_choice_json(const LbChoice& c) {
  std::vector<std::string> chosen;  // the fields pstwin chose (the others the scenario set)
  if (c.chose_partition_bytes) chosen.emplace_back("ps.partition_bytes");
  if (c.chose_scheduling_credit) chosen.emplace_back("ps.scheduling_credit");
  if (c.chose_push_pull) chosen.emplace_back("ps.push_pull");
  if (c.chose_send_pool_slots) chosen.emplace_back("sim.send_pool_slots");
  if (c.chose_network_model) chosen.emplace_back("sim.network_model");
  if (c.chose_pipeline_messages) chosen.emplace_back("sim.pipeline_messages");
  return {{"partition_bytes", c.partition_bytes},
          {"scheduling_credit", c.scheduling_credit},
          {"fused", c.fused},
          {"send_pool_slots", c.send_pool_slots},
          {"network_model", c.network_model},
          {"pipeline_messages", c.pipeline_messages},
          {"chosen_fields", chosen}};
}

LbChoice lb_choice_from_json(const nlohmann::json& j) {
  LbChoice c{.partition_bytes = j.at("partition_bytes"),
             .scheduling_credit = j.at("scheduling_credit"),
             .fused = j.at("fused"),
             .send_pool_slots = j.value("send_pool_slots", 0),
             .network_model = j.value("network_model", std::string()),
             .pipeline_messages = j.value("pipeline_messages", false)};
  for (const auto& field : j.at("chosen_fields")) {
    const auto name = field.get<std::string>();
    c.chose_partition_bytes |= name == "ps.partition_bytes";
    c.chose_scheduling_credit |= name == "ps.scheduling_credit";
    c.chose_push_pull |= name == "ps.push_pull";
    c.chose_send_pool_slots |= name == "sim.send_pool_slots";
    c.chose_network_model |= name == "sim.network_model";
    c.chose_pipeline_messages |= name == "sim.pipeline_messages";
  }
  return c;
}

nlohmann::ordered_json balancing_json(const BalancingReport& b) {
  nlohmann::ordered_json j;
  j["balanced_mean_s"] = b.balanced_mean_s;
  j["balanced_iterations"] = b.balanced_iterations;
  j["decisions"] = nlohmann::ordered_json::array();
  for (const auto& d : b.decisions)
    j["decisions"].push_back({{"iteration", d.iteration},
                              {"version", d.version},
                              {"probe", d.probe},
                              {"reason", d.reason},
                              {"bytes_per_server", d.bytes_per_server}});
  j["measured"] = nlohmann::ordered_json::array();
  for (const auto& m : b.measured)
    j["measured"].push_back({{"iteration", m.iteration},
                             {"server", m.server},
                             {"rate_Bps", m.rate_Bps},
                             {"utilization", m.utilization}});
  return j;
}

BalancingReport balancing_from_json(const nlohmann::json& j) {
  BalancingReport b;
  b.balanced_mean_s = j.at("balanced_mean_s");
  b.balanced_iterations = j.at("balanced_iterations");
  for (const auto& d : j.at("decisions"))
    b.decisions.push_back({d.at("iteration"), d.at("version"), d.at("probe"), d.at("reason"),
                           d.at("bytes_per_server").get<std::vector<std::uint64_t>>()});
  for (const auto& m : j.at("measured"))
    b.measured.push_back({m.at("iteration"), m.at("server"), m.at("rate_Bps"), m.at("utilization")});
  return b;
}

nlohmann::ordered_json selection_json(const SelectionSummary& selection) {
  using nlohmann::ordered_json;
  ordered_json s;
  s["rule"] = selection.rule;
  s["judged"] = selection.judged;
  s["accepted"] = selection.accepted;
  s["verdicts"] = ordered_json::object();
  for (const auto& [verdict, count] : selection.verdicts) s["verdicts"][verdict] = count;
  s["per_worker"] = ordered_json::array();
  for (std::size_t w = 0; w < selection.per_worker.size(); ++w) {
    const auto& worker = selection.per_worker[w];
    const double mean_share =
        worker.judged == 0 ? 0.0 : worker.share_sum / static_cast<double>(worker.judged);
    s["per_worker"].push_back({{"worker", w},
                               {"judged", worker.judged},
                               {"accepted", worker.accepted},
                               {"mean_share", std::round(mean_share * 1e6) / 1e6}});
  }
  return s;
}

SelectionSummary selection_from_json(const nlohmann::json& s) {
  SelectionSummary summary;
  summary.rule = s.at("rule");
  summary.judged = s.at("judged");
  summary.accepted = s.at("accepted");
  for (const auto& [verdict, count] : s.at("verdicts").items()) summary.verdicts[verdict] = count;
  for (const auto& w : s.at("per_worker")) {
    const std::uint64_t judged = w.at("judged");
    summary.per_worker.push_back(
        {judged, w.at("accepted"), w.at("mean_share").get<double>() * static_cast<double>(judged)});
  }
  return summary;
}

void add_selection(SelectionSummary& into, const SelectionSummary& more) {
  if (into.rule.empty()) into.rule = more.rule;
  into.judged += more.judged;
  into.accepted += more.accepted;
  for (const auto& [verdict, count] : more.verdicts) into.verdicts[verdict] += count;
  if (into.per_worker.size() < more.per_worker.size()) into.per_worker.resize(more.per_worker.size());
  for (std::size_t w = 0; w < more.per_worker.size(); ++w) {
    into.per_worker[w].judged += more.per_worker[w].judged;
    into.per_worker[w].accepted += more.per_worker[w].accepted;
    into.per_worker[w].share_sum += more.per_worker[w].share_sum;
  }
}

nlohmann::ordered_json validation_json(const ValidationSummary& validation) {
  using nlohmann::ordered_json;
  ordered_json v;
  v["judged"] = validation.judged;
  v["accepted"] = validation.accepted;
  v["per_worker"] = ordered_json::array();
  for (const auto& [judged, accepted] : validation.per_worker) v["per_worker"].push_back({judged, accepted});
  return v;
}

ValidationSummary validation_from_json(const nlohmann::json& v) {
  ValidationSummary summary{v.at("judged"), v.at("accepted"), {}};
  for (const auto& w : v.at("per_worker")) summary.per_worker.emplace_back(w.at(0), w.at(1));
  return summary;
}

void add_validation(ValidationSummary& into, const ValidationSummary& more) {
  into.judged += more.judged;
  into.accepted += more.accepted;
  if (into.per_worker.size() < more.per_worker.size()) into.per_worker.resize(more.per_worker.size());
  for (std::size_t w = 0; w < more.per_worker.size(); ++w) {
    into.per_worker[w].first += more.per_worker[w].first;
    into.per_worker[w].second += more.per_worker[w].second;
  }
}

nlohmann::ordered_json staleness_json(const StalenessSummary& s) {
  return {{"bound", s.bound},       {"applied", s.applied},
          {"refused", s.refused},   {"max_applied", s.max_applied},
          {"max_seen", s.max_seen}, {"refused_per_worker", s.refused_per_worker}};
}

StalenessSummary staleness_from_json(const nlohmann::json& s) {
  return StalenessSummary{s.at("bound"),       s.at("applied"),  s.at("refused"),
                          s.at("max_applied"), s.at("max_seen"), s.at("refused_per_worker")};
}

void add_staleness(StalenessSummary& into, const StalenessSummary& more) {
  into.bound = more.bound;
  into.applied += more.applied;
  into.refused += more.refused;
  into.max_applied = std::max(into.max_applied, more.max_applied);
  into.max_seen = std::max(into.max_seen, more.max_seen);
  if (into.refused_per_worker.size() < more.refused_per_worker.size())
    into.refused_per_worker.resize(more.refused_per_worker.size(), 0);
  for (std::size_t w = 0; w < more.refused_per_worker.size(); ++w)
    into.refused_per_worker[w] += more.refused_per_worker[w];
}

nlohmann::ordered_json accuracy_json(const AccuracyCurve& accuracy) {
  nlohmann::ordered_json j;
  j["final"] = accuracy.final_accuracy;
  j["curve"] = nlohmann::ordered_json::array();
  for (const auto& p : accuracy.curve)
    j["curve"].push_back({{"iteration", p.iteration}, {"time_s", p.time_s}, {"accuracy", p.accuracy}});
  j["diverged"] = accuracy.diverged.has_value();
  if (accuracy.diverged) {
    j["diverged_iteration"] = accuracy.diverged->iteration;
    j["diverged_reason"] = accuracy.diverged->reason;
  }
  return j;
}

AccuracyCurve accuracy_from_json(const nlohmann::json& j) {
  AccuracyCurve accuracy;
  accuracy.final_accuracy = j.at("final");
  for (const auto& p : j.at("curve"))
    accuracy.curve.push_back({p.at("iteration"), p.at("time_s"), p.at("accuracy")});
  if (j.value("diverged", false))
    accuracy.diverged = Divergence{j.at("diverged_iteration"), j.at("diverged_reason")};
  return accuracy;
}

RunReport report_from_json(const nlohmann::ordered_json& j) {
  RunReport r;
  r.scenario = j.at("scenario").get<std::string>();
  r.backend = j.at("backend").get<std::string>();
  r.van = j.value("van", std::string());
  r.seed = j.at("seed").get<std::uint64_t>();
  r.completed = j.at("completed").get<bool>();
  r.failure = j.at("failure").get<std::string>();
  for (const auto& it : j.at("iterations")) r.iterations.push_back({it.at("index"), it.at("time_s")});
  r.invariants_checked = j.at("invariants").at("checked");
  r.violation_count = j.at("invariants").at("violation_count");
  for (const auto& v : j.at("invariants").at("violations")) {
    r.violations.push_back({v.at("invariant"), v.at("detail")});
    if (v.contains("time_s")) r.violations.back().time_s = v["time_s"].get<double>();
    r.violations.back().node = v.value("node", kNoNode);
  }
  if (j.at("invariants").contains("by_invariant"))
    add_tallies_from_json(j["invariants"]["by_invariant"], r.invariant_tallies);
  for (const auto& l : j.at("links")) {
    LinkUsage link{l.at("name"), l.at("bytes")};
    if (l.contains("bandwidth_Bps")) link.bandwidth_Bps = l["bandwidth_Bps"].get<double>();
    if (l.contains("utilization")) link.utilization = l["utilization"].get<double>();
    if (l.contains("phase_utilization")) link.phase_utilization = l["phase_utilization"].get<double>();
    if (l.contains("drops")) link.drops = l["drops"].get<std::uint64_t>();
    if (l.contains("retransmitted")) link.retransmitted = l["retransmitted"].get<std::uint64_t>();
    if (l.contains("over_time")) {
      link.over_time_width_s = l["over_time"].at("width_s");
      link.over_time = l["over_time"].at("utilization").get<std::vector<double>>();
    }
    r.links.push_back(std::move(link));
  }
  if (j.contains("network_emulation")) {
    const auto& e = j["network_emulation"];
    r.emulation = NetworkEmulation{e.at("method"), e.at("latency_emulated"), e.at("note")};
  }
  r.model_digest = j.at("model_digest").get<std::string>();
  if (j.contains("accuracy")) r.accuracy = accuracy_from_json(j["accuracy"]);
  if (!j.at("bound").is_null())
    r.bound = Bound{j["bound"].at("time_s"), j["bound"].at("formula"), j["bound"].value("achieved_s", 0.0)};
  if (j.contains("balancing")) r.balancing = balancing_from_json(j["balancing"]);
  if (j.contains("lb")) r.lb_chosen = lb_choice_from_json(j["lb"].at("chosen"));
  if (j.contains("selection")) r.selection = selection_from_json(j["selection"]);
  if (j.contains("validation")) r.validation = validation_from_json(j["validation"]);
  if (j.contains("late_pushes")) r.late_pushes = j["late_pushes"].get<std::uint64_t>();
  if (j.contains("refused"))
    r.refused = j["refused"].get<std::map<std::string, std::map<std::string, std::uint64_t>>>();
  if (j.contains("staleness")) r.staleness = staleness_from_json(j["staleness"]);
  if (j.contains("faults")) r.faults = faults_from_json(j["faults"]);
  for (const auto& n : j.at("nodes")) r.nodes.push_back(node_info_from_json(n));
  r.run_time_s = j.at("run_time_s");
  r.messages = j.at("messages");
  r.message_bytes = j.at("message_bytes");
  if (j.contains("cross_host"))
    r.cross_host = {j["cross_host"].at("bytes"), j["cross_host"].at("push_pull_bytes")};
  r.replay = j.at("replay").get<std::string>();
  r.trace_dropped = j.at("trace_dropped");
  r.wall_s = j.at("wall_s");
  return r;
}

nlohmann::ordered_json faults_json(const FaultCounts& c) {
  return {{"injected",
           {{"loss", c.lost},
            {"duplicate", c.duplicated},
            {"partition", c.partitioned},
            {"clog", c.clogged},
            {"clog_hold_s", c.clog_hold_s},
            {"slow", c.slowed},
            {"crash", c.crashed},
            {"crash_dropped", c.crash_dropped}}},
          {"lost_workers", c.lost_workers},
          {"resend",
           {{"enabled", c.resend_enabled},
            {"resent", c.resent},
            {"duplicates_dropped", c.duplicates_dropped},
            {"acks", c.acks},
            {"given_up", c.given_up}}},
          {"first_drop", c.first_drop}};
}

FaultCounts faults_from_json(const nlohmann::ordered_json& j) {
  FaultCounts c;
  const auto& injected = j.at("injected");
  c.lost = injected.at("loss");
  c.duplicated = injected.at("duplicate");
  c.partitioned = injected.at("partition");
  c.clogged = injected.at("clog");
  c.clog_hold_s = injected.at("clog_hold_s");
  c.slowed = injected.at("slow");
  c.crashed = injected.value("crash", std::uint64_t{0});
  c.crash_dropped = injected.value("crash_dropped", std::uint64_t{0});
  if (j.contains("lost_workers")) c.lost_workers = j.at("lost_workers").get<std::vector<std::string>>();
  const auto& resend = j.at("resend");
  c.resend_enabled = resend.at("enabled");
  c.resent = resend.at("resent");
  c.duplicates_dropped = resend.at("duplicates_dropped");
  c.acks = resend.at("acks");
  c.given_up = resend.at("given_up");
  c.first_drop = j.at("first_drop").get<std::string>();
  return c;
}

namespace {

// "send->8" -> "send->server 0": connection lanes named by the peer's role and rank, as processes
// are; a node id the table does not know stays as it is.
std::string lane_name(const std::string& lane, const std::map<NodeId, std::string>& node_names) {
  for (const std::string_view prefix : {"send->", "recv<-"}) {
    if (!lane.starts_with(prefix)) continue;
    const std::string id = lane.substr(prefix.size());
    if (id.empty() || id.size() > 10 || id.find_first_not_of("0123456789") != std::string::npos) return lane;
    const auto node = static_cast<NodeId>(std::stoul(id));
    // The scheduler's answer to a registration, before the node had an id.
    if (node >= kRegistrantIdBase)
      return std::string(prefix) + "registrant " + std::to_string(node - kRegistrantIdBase);
    const auto it = node_names.find(node);
    return it == node_names.end() ? lane : std::string(prefix) + it->second;
  }
  return lane;
}

// "worker 3" (or "worker 3 (h1)") -> 3 for a worker's process label; -1 for any other.
int worker_rank(std::string_view process) {
  constexpr std::string_view prefix = "worker ";
  if (!process.starts_with(prefix)) return -1;
  int rank = 0;
  bool digits = false;
  for (const char c : process.substr(prefix.size())) {
    if (c < '0' || c > '9') break;
    rank = rank * 10 + (c - '0');
    digits = true;
  }
  return digits ? rank : -1;
}

bool is_push_send(const TraceSpan& span) {
  return span.category == "send" && (span.name == "push" || span.name == "push_pull");
}

}  // namespace

std::string trace_warning(const RunReport& report) {
  if (report.trace_dropped == 0) return "";
  return "trace.json is incomplete: " + std::to_string(report.trace_dropped) + " events beyond " +
         std::to_string(report.trace.size()) +
         " were dropped (output.trace_max_events); raise it, or trace fewer iterations or workers";
}

namespace {

// Appends JSON text exactly as nlohmann's dump() writes it, without building a document: a trace
// holds hundreds of thousands of small objects, and building and freeing their DOM cost several times
// the simulation that recorded them.
class FlatJson {
 public:
  explicit FlatJson(std::string& out) : out_(out) {}
  FlatJson& open() {
    out_ += '{';
    first_ = true;
    return *this;
  }
  FlatJson& close() {
    out_ += '}';
    first_ = false;
    return *this;
  }
  FlatJson& key(std::string_view name) {  // names are plain ASCII literals: nothing to escape
    if (!first_) out_ += ',';
    first_ = false;
    out_ += '"';
    out_ += name;
    out_ += "\":";
    return *this;
  }
  FlatJson& text(std::string_view value) {
    out_ += nlohmann::json(value).dump();  // nlohmann's escaping, as the rest of the file
    return *this;
  }
  FlatJson& number(double value) {
    out_ += nlohmann::json(value).dump();  // its shortest round-trip form ("1.0", "2.5e-05")
    return *this;
  }
  template <std::integral Integer>
  FlatJson& number(Integer value) {
    std::array<char, 24> digits{};
    const auto end = std::to_chars(digits.data(), digits.data() + digits.size(), value).ptr;
    out_.append(digits.data(), end);
    return *this;
  }
  FlatJson& field(std::string_view name, std::string_view value) { return key(name).text(value); }
  template <typename Number>
  requires std::is_arithmetic_v<Number> FlatJson& field(std::string_view name, Number value) {
    return key(name).number(value);
  }

 private:
  std::string& out_;
  bool first_ = true;
};

}  // namespace

std::string trace_json(const RunReport& report) {
  // Chrome's trace viewer wants integer-ish microseconds; tids are numbered per process in order of
  // first appearance so the file is deterministic. Events are written as text, in order, each one
  // after a comma but the first.
  std::string events;
  events.reserve(report.trace.size() * 160);
  auto next_event = [&]() -> FlatJson {
    if (!events.empty()) events += ',';
    return FlatJson(events);
  };
  std::map<std::pair<int, std::string>, int> tids;
  std::map<int, std::string> processes;
  // The scheduler is not in its own node table; a node still registering has no id yet.
  std::map<NodeId, std::string> node_names = {{kSchedulerId, "scheduler"}, {kNoNode, "registering node"}};
  for (const auto& n : report.nodes)
    node_names[n.id] = n.role == Role::kScheduler
                           ? "scheduler"
                           : std::string(role_name(n.role)) + " " + std::to_string(n.rank);
  auto tid_of = [&](int pid, const std::string& thread) {
    auto [it, inserted] = tids.try_emplace({pid, thread}, static_cast<int>(tids.size()) + 1);
    if (inserted)
      next_event()
          .open()
          .field("name", "thread_name")
          .field("ph", "M")
          .field("pid", pid)
          .field("tid", it->second)
          .key("args")
          .open()
          .field("name", thread)
          .close()
          .close();
    return it->second;
  };
  // One flow per worker's push of a key in an iteration: its copy, its push, the send carrying it and
  // the aggregation of it, joined by arrows in time order (Chrome/Perfetto flow events).
  struct FlowPoint {
    double ts_us;
    int pid;
    int tid;
  };
  std::map<std::tuple<int, std::uint64_t, std::uint32_t>, std::vector<FlowPoint>> flows;
  std::vector<std::tuple<int, std::uint64_t, std::uint32_t>> flow_order;
  for (const auto& span : report.trace) {
    processes.emplace(span.pid, span.process);
    const int tid = tid_of(span.pid, lane_name(span.thread, node_names));
    auto event = next_event();
    event.open()
        .field("name", span.name)
        .field("cat", span.category)
        .field("ph", "X")
        .field("ts", span.start_s * 1e6)
        .field("dur", (span.end_s - span.start_s) * 1e6)
        .field("pid", span.pid)
        .field("tid", tid);
    if (const auto& m = span.message) {
      event.key("args").open().field("key", m->key).field("iteration", m->iteration).field("bytes", m->bytes);
      if (m->worker >= 0) event.field("worker", m->worker);
      if (!m->buffer.empty()) event.field("buffer", m->buffer);
      event.close();
      const int worker = is_push_send(span) ? worker_rank(span.process) : m->worker;
      const bool joins = is_push_send(span) || span.category == "copy" || span.category == "push" ||
                         (span.category == "engine" && span.name == "aggregate");
      if (joins && worker >= 0) {
        auto [flow, fresh] = flows.try_emplace({worker, m->key, m->iteration});
        if (fresh) flow_order.push_back(flow->first);
        flow->second.push_back({span.start_s * 1e6, span.pid, tid});
      }
    }
    event.close();
  }
  std::uint64_t flow_id = 0;
  for (const auto& id : flow_order) {
    auto& points = flows[id];
    ++flow_id;
    if (points.size() < 2) continue;
    std::stable_sort(points.begin(), points.end(),
                     [](const FlowPoint& a, const FlowPoint& b) { return a.ts_us < b.ts_us; });
    for (std::size_t i = 0; i < points.size(); ++i) {
      const char* phase = i == 0 ? "s" : (i + 1 == points.size() ? "f" : "t");
      next_event()
          .open()
          .field("name", "push")
          .field("cat", "flow")
          .field("ph", phase)
          .field("id", flow_id)
          .field("bp", "e")
          .field("ts", points[i].ts_us)
          .field("pid", points[i].pid)
          .field("tid", points[i].tid)
          .close();
    }
  }
  // A marker where and when each kept violation was seen; the process of its node, else global.
  std::map<std::string, int> pid_of_process;
  for (const auto& [pid, name] : processes) pid_of_process.emplace(name, pid);
  for (const auto& v : report.violations) {
    if (!v.time_s) continue;
    const auto name = node_names.find(v.node);
    const auto pid = name == node_names.end() ? pid_of_process.end() : pid_of_process.find(name->second);
    const bool on_node = pid != pid_of_process.end();
    const int marker_tid = on_node ? tid_of(pid->second, "violations") : 0;  // its lane comes first
    next_event()
        .open()
        .field("name", "violation: " + v.invariant)
        .field("cat", "violation")
        .field("ph", "i")
        .field("ts", *v.time_s * 1e6)
        .key("args")
        .open()
        .field("invariant", v.invariant)
        .field("detail", v.detail)
        .close()
        .field("s", on_node ? "p" : "g")
        .field("pid", on_node ? pid->second : 0)
        .field("tid", marker_tid)
        .close();
  }
  for (const auto& [pid, name] : processes)
    next_event()
        .open()
        .field("name", "process_name")
        .field("ph", "M")
        .field("pid", pid)
        .key("args")
        .open()
        .field("name", name)
        .close()
        .close();
  nlohmann::ordered_json other = {{"scenario", report.scenario},
                                  {"backend", report.backend},
                                  {"seed", report.seed},
                                  {"dropped_spans", report.trace_dropped}};
  if (report.trace_dropped > 0) other["warning"] = trace_warning(report);
  return "{\"traceEvents\":[" + events + "],\"displayTimeUnit\":\"ms\",\"otherData\":" + other.dump() + "}\n";
}

void write_outputs(const RunReport& report, const Scenario& scenario, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path base(dir);
  write_file(base / "results.json", to_json(report).dump(2) + "\n");
  write_file(base / "resolved.toml", resolved_toml(scenario));
  if (scenario.output.trace) write_file(base / "trace.json", trace_json(report));
}

std::string violation_lines(const std::vector<Violation>& violations, const InvariantTallies& tallies,
                            std::string_view prefix, std::string_view where) {
  // Dozens of near-identical lines hide the one that differs: a few per invariant and a count.
  std::vector<std::string> order;
  std::map<std::string, std::size_t> listed;
  std::ostringstream out;
  for (const auto& v : violations) {
    auto [it, fresh] = listed.try_emplace(v.invariant, 0);
    if (fresh) order.push_back(v.invariant);
    if (it->second++ < kViolationsShown) out << prefix << "[" << v.invariant << "] " << v.detail << "\n";
  }
  for (const auto& name : order) {
    std::size_t total = listed[name];
    if (const auto t = tallies.find(name); t != tallies.end())
      total = std::max<std::size_t>(total, t->second.violated);
    if (total > kViolationsShown)
      out << prefix << "... and " << total - kViolationsShown << " more [" << name << "] violation"
          << (total - kViolationsShown == 1 ? "" : "s") << " (see " << where << ")\n";
  }
  return out.str();
}

std::string summary_text(const RunReport& r, std::string_view results_path) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(6);
  out << "scenario " << r.scenario << " (" << r.backend << ", seed " << r.seed
      << "): " << (r.completed ? "completed" : "DID NOT COMPLETE") << "\n";
  if (!r.failure.empty()) out << "  failure: " << r.failure << "\n";
  out << "  iterations: " << r.iterations.size() << ", mean " << r.mean_iteration_s() << " s";
  if (!r.iterations.empty()) {
    double slowest = 0;
    for (const auto& it : r.iterations) slowest = std::max(slowest, it.time_s);
    out << ", slowest " << slowest << " s";
  }
  out << "\n";
  if (r.bound && !r.iterations.empty()) {
    const double achieved = r.bound->achieved_s > 0 ? r.bound->achieved_s : r.mean_iteration_s();
    out << "  analytic bound: " << r.bound->time_s << " s per iteration (achieved " << achieved
        << " s, achieved/bound = " << achieved / r.bound->time_s << ")\n";
  }
  if (r.breakdown && !r.breakdown->largest.empty()) {
    out << "  time breakdown: " << r.breakdown->largest;
    // Credit or network: when waiting for credit is the largest share, the busiest link says which
    // one holds the pushes back.
    double credit = 0;
    for (const auto& w : r.breakdown->workers) credit += w.credit_wait_s;
    double largest_other = 0;
    for (const auto field : {&WorkerTimes::compute_s, &WorkerTimes::push_s, &WorkerTimes::copy_s,
                             &WorkerTimes::pull_s, &WorkerTimes::aggregate_wait_s}) {
      double sum = 0;
      for (const auto& w : r.breakdown->workers) sum += w.*field;
      largest_other = std::max(largest_other, sum);
    }
    double busiest_link = 0;
    bool bandwidth_known = false;
    for (const auto& l : r.links)
      if (l.utilization) busiest_link = std::max(busiest_link, *l.utilization), bandwidth_known = true;
    // Near its bound the network is the limit; well above it with links far from full, the credit is.
    const double achieved = r.bound && r.bound->achieved_s > 0 ? r.bound->achieved_s : r.mean_iteration_s();
    const double ratio = r.bound && r.bound->time_s > 0 ? achieved / r.bound->time_s : 0;
    if (credit > largest_other && bandwidth_known) {
      out << "; the busiest link carried " << std::setprecision(0) << busiest_link * 100
          << std::setprecision(6) << " % of its bandwidth";
      if (ratio > 0 && ratio <= 1.1)
        out << ": within 10 % of the bound, the network is the limit";
      else if (busiest_link < 0.8)
        out << ": the credit, not the network, limits the pipeline";
      else
        out << ": the network is near its limit as well";
    }
    out << "\n";
  }
  if (r.balancing && !r.balancing->decisions.empty())
    out << "  load balancing: " << r.balancing->decisions.size() << " decisions, last version "
        << r.balancing->decisions.back().version << "; balanced iterations "
        << r.balancing->balanced_iterations << ", mean " << r.balancing->balanced_mean_s << " s\n";
  if (r.lb_chosen) {
    const LbChoice& c = *r.lb_chosen;
    auto origin = [](bool chosen) { return chosen ? " (chosen)" : " (set)"; };
    out << "  load-balancing partitioning: ps.partition_bytes = " << c.partition_bytes
        << origin(c.chose_partition_bytes) << ", ps.scheduling_credit = " << c.scheduling_credit
        << origin(c.chose_scheduling_credit) << ", ps.push_pull = " << (c.fused ? "fused" : "separate")
        << origin(c.chose_push_pull) << "\n";
    out << "  load-balancing transport (simulator): sim.send_pool_slots = " << c.send_pool_slots
        << origin(c.chose_send_pool_slots) << ", sim.network_model = " << c.network_model
        << origin(c.chose_network_model) << ", sim.pipeline_messages = " << std::boolalpha
        << c.pipeline_messages << std::noboolalpha << origin(c.chose_pipeline_messages) << "\n";
  }
  out << "  messages: " << r.messages << " (" << r.message_bytes << " bytes; " << r.cross_host.bytes
      << " between hosts, " << r.cross_host.push_pull_bytes << " of them pushes and pulls), run time "
      << r.run_time_s << " s\n";
  double busiest = 0;
  std::string busiest_name;
  const LinkUsage* most_bytes = nullptr;
  for (const auto& l : r.links) {
    if (l.utilization && *l.utilization > busiest) busiest = *l.utilization, busiest_name = l.name;
    if (!most_bytes || l.bytes > most_bytes->bytes) most_bytes = &l;
  }
  if (!busiest_name.empty()) {
    out << "  busiest link: " << busiest_name << " at " << busiest * 100 << " % utilisation\n";
  } else if (most_bytes && most_bytes->bytes > 0) {
    // Utilisation against a bandwidth nothing enforced would be a made-up figure.
    out << "  busiest link: " << most_bytes->name << " carried " << most_bytes->bytes
        << " bytes (no bandwidth was emulated: loopback, so no utilisation; --netns shapes links)\n";
  }
  if (r.emulation)
    out << "  network: " << r.emulation->method
        << (r.emulation->latency_emulated ? "" : " (latency NOT emulated: the machine's own applies)")
        << "\n";
  out << "  model digest: " << r.model_digest << "\n";
  if (r.accuracy)
    out << "  test accuracy: " << r.accuracy->final_accuracy << " after "
        << (r.accuracy->curve.empty() ? 0 : r.accuracy->curve.back().iteration) << " iterations"
        << (r.accuracy->diverged
                ? "; DIVERGED at iteration " + std::to_string(r.accuracy->diverged->iteration) + ": " +
                      r.accuracy->diverged->reason
                : "")
        << "\n";
  if (r.staleness)
    out << "  staleness: " << r.staleness->refused << " pushes refused beyond " << r.staleness->bound << ", "
        << r.staleness->applied << " applied (largest staleness applied " << r.staleness->max_applied
        << ")\n";
  if (r.selection) {
    const auto& s = *r.selection;
    out << "  " << s.rule << " on the servers: " << s.accepted << " of " << s.judged
        << " gradients in the update";
    for (const auto& [verdict, count] : s.verdicts)
      if (verdict != "accepted") out << ", " << count << " " << verdict;
    // The worker whose gradients weighed least: a rule that holds an attacker out shows it here.
    std::size_t least = 0;
    double least_share = -1;
    for (std::size_t w = 0; w < s.per_worker.size(); ++w) {
      const auto& worker = s.per_worker[w];
      if (worker.judged == 0) continue;
      const double share = worker.share_sum / static_cast<double>(worker.judged);
      if (least_share < 0 || share < least_share) least = w, least_share = share;
    }
    if (least_share >= 0)
      out << "; least weight: worker " << least << ", " << s.per_worker[least].accepted << " of "
          << s.per_worker[least].judged << " accepted, mean share " << std::setprecision(3) << least_share
          << std::setprecision(6);
    out << "\n";
  }
  if (r.validation)
    out << "  validators: " << r.validation->accepted << " of " << r.validation->judged
        << " updates accepted\n";
  if (r.late_pushes) out << "  backup workers: " << *r.late_pushes << " late pushes dropped\n";
  if (!r.refused.empty()) {
    std::uint64_t total = 0;
    for (const auto& [node, peers] : r.refused)
      for (const auto& [peer, count] : peers) total += count;
    out << "  refused: " << total << " messages or connections (malformed, forged, unauthenticated; "
        << "by node and peer in results.json `refused`)\n";
  }
  if (const auto& f = r.faults) {
    out << "  faults injected: loss " << f->lost << ", duplicate " << f->duplicated << ", partition "
        << f->partitioned << ", clog " << f->clogged << " (held " << f->clog_hold_s << " s), slow "
        << f->slowed << " tasks";
    if (f->crashed > 0) out << ", crash " << f->crashed << " node(s)";
    out << "\n";
    if (!f->lost_workers.empty()) {
      out << "  workers lost, the job went on without them:";
      for (const auto& lost : f->lost_workers)
        out << " " << lost << (&lost == &f->lost_workers.back() ? "" : ",");
      out << "\n";
    }
    if (f->resend_enabled)
      out << "  resend: " << f->resent << " resent, " << f->duplicates_dropped << " duplicates dropped, "
          << f->acks << " acks, " << f->given_up << " given up at stop\n";
    else
      out << "  resend: off\n";
  }
  if (r.trace_dropped > 0) out << "  warning: " << trace_warning(r) << "\n";
  out << "  invariants: " << r.invariants_checked << " checked, " << r.violation_count << " violated\n";
  // The rate is the evidence for a race (crossed aggregates per aggregate), not only its existence.
  for (const auto& [name, t] : r.invariant_tallies)
    if (t.violated > 0 && t.checked > 0)
      out << "    " << name << ": " << t.violated << " of " << t.checked << " checks violated ("
          << std::setprecision(1) << 100.0 * static_cast<double>(t.violated) / static_cast<double>(t.checked)
          << std::setprecision(6) << " %)\n";
  out << violation_lines(r.violations, r.invariant_tallies, "    ",
                         results_path.empty() ? std::string_view("results.json") : results_path);
  if (!r.ok()) out << "  seed " << r.seed << "; replay: " << r.replay << "\n";
  out.precision(3);
  out << "  wall: " << r.wall_s << " s\n";
  return out.str();
}

}  // namespace pstwin
