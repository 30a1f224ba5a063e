#include "ps/faults.hpp"

#include <algorithm>
#include <sstream>

namespace pstwin {
namespace {

bool on_side(const FaultSide& side, FaultEndpoint end) {
  const auto& names = side.hosts.empty() ? side.nodes : side.hosts;
  const std::string_view name = side.hosts.empty() ? end.node : end.host;
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A fault between a side and the rest hits a message whose ends lie on different sides of it.
bool separates(const FaultSide& side, FaultEndpoint a, FaultEndpoint b) {
  return on_side(side, a) != on_side(side, b);
}

}  // namespace

void add_fault_counts(FaultCounts& total, const FaultCounts& node) {
  total.lost += node.lost;
  total.duplicated += node.duplicated;
  total.partitioned += node.partitioned;
  total.clogged += node.clogged;
  total.clog_hold_s += node.clog_hold_s;
  total.slowed += node.slowed;
  total.crashed += node.crashed;
  total.crash_dropped += node.crash_dropped;
  total.resent += node.resent;
  total.duplicates_dropped += node.duplicates_dropped;
  total.acks += node.acks;
  total.given_up += node.given_up;
  if (total.first_drop.empty()) total.first_drop = node.first_drop;
}

FaultPlan::FaultPlan(const Scenario& scenario) : faults_(scenario.faults) {}

bool FaultPlan::is_data(Command command) {
  return command == Command::kPush || command == Command::kPull || command == Command::kPushPull;
}

FaultPlan::Fate FaultPlan::fate(const MessageHeader& header,
                                const std::function<RandomStream&(std::string_view)>& random) const {
  if (header.sender == kNoNode) return Fate::kDeliver;
  if (faults_.message_class != "all" && (faults_.message_class == "data") != is_data(header.command))
    return Fate::kDeliver;
  if (faults_.loss > 0 && random("faults.loss").uniform01() < faults_.loss) return Fate::kLose;
  if (faults_.duplicate > 0 && random("faults.duplicate").uniform01() < faults_.duplicate)
    return Fate::kDuplicate;
  return Fate::kDeliver;
}

bool FaultPlan::partitioned(Seconds now, FaultEndpoint a, FaultEndpoint b) const {
  return std::any_of(faults_.partitions.begin(), faults_.partitions.end(), [&](const PartitionFault& p) {
    return now >= p.from_s && now < p.until_s && separates(p.side, a, b);
  });
}

Seconds FaultPlan::clog_release(Seconds now, FaultEndpoint a, FaultEndpoint b) const {
  Seconds release = now;
  // Repeat until no clog covers the release time: one clog may end inside the next.
  for (bool moved = true; moved;) {
    moved = false;
    for (const auto& clog : faults_.clogs) {
      const Seconds until = clog.from_s + clog.duration_s;
      if (release >= clog.from_s && release < until && separates(clog.side, a, b)) {
        release = until;
        moved = true;
      }
    }
  }
  return release;
}

double FaultPlan::slow_factor(Seconds now, std::string_view node) const {
  double factor = 1;
  for (const auto& slow : faults_.slow)
    if (slow.node == node && now >= slow.from_s && now < slow.until_s) factor *= slow.factor;
  return factor;
}

std::string describe_drop(const MessageHeader& header, std::string_view from, std::string_view to, Seconds at,
                          std::string_view why) {
  std::ostringstream out;
  out << command_name(header.command) << (header.is_response ? " response" : "");
  if (FaultPlan::is_data(header.command)) out << " key " << header.key << " iteration " << header.iteration;
  out << " from " << from << " to " << to << " at " << at << " s (" << why << ")";
  return out.str();
}

}  // namespace pstwin
