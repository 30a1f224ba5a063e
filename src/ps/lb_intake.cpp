#include "ps/lb_intake.hpp"

#include <algorithm>

#include "core/codec.hpp"
#include "ps/ids.hpp"

namespace pstwin {
namespace {
bool carries_push(Command command) {
  return command == Command::kPush || command == Command::kPushPull;
}
}  // namespace

std::string slot_name(int slot, int servers) {
  return slot < servers ? "server " + std::to_string(slot)
                        : "worker aggregator " + std::to_string(slot - servers);
}

RangeIntake::RangeIntake(Runtime& runtime, RangeIntakeOptions options, RunObserver& observer,
                         const SyntheticWorkload& workload, DecisionBook& book, BandwidthMonitor& monitor,
                         bool report_on_last_push)
    : rt_(runtime),
      options_(std::move(options)),
      observer_(observer),
      workload_(workload),
      book_(book),
      monitor_(monitor),
      report_on_last_push_(report_on_last_push) {}

std::optional<Message> RangeIntake::admit(Message message) {
  const auto& h = message.header;
  // Our own pushes to our own range cross no link: they would only inflate the measured rate.
  if (carries_push(h.command) && h.sender != rt_.self())
    monitor_.received(h.iteration, h.sender, message.payload.size() + kHeaderBytes, rt_.now());
  const LbDecision* decision = book_.find(h.iteration);
  if (!decision) {
    held_[h.iteration].push_back(std::move(message));
    return std::nullopt;
  }
  if (!accept(message, *decision)) return std::nullopt;
  return message;
}

std::vector<Message> RangeIntake::release(const LbDecision& decision) {
  std::vector<Message> ready;
  auto held = held_.extract(decision.iteration);
  if (held.empty()) return ready;
  for (auto& request : held.mapped())
    if (accept(request, decision)) ready.push_back(std::move(request));
  return ready;
}

std::size_t RangeIntake::held() const {
  std::size_t count = 0;
  for (const auto& [iteration, requests] : held_) count += requests.size();
  return count;
}

bool RangeIntake::accept(const Message& message, const LbDecision& decision) {
  const auto& h = message.header;
  const auto index = workload_.index_of(h.key);
  observer_.request_routed(rt_.self(), h.sender, h.key, h.iteration);
  // The slot the scheduler's node table gives us (rank_ is -1 for a real node that asked for none).
  const int servers = options_.servers;
  const int slot = slot_of(rt_.self(), servers);
  if (decision.owner[index] != slot) {
    rt_.fail(slot_name(slot, servers) + " got a " + std::string(command_name(h.command)) + " from node " +
             std::to_string(h.sender) + " for key " + std::to_string(h.key) + ", iteration " +
             std::to_string(h.iteration) + ", which decision " + std::to_string(decision.version) +
             " gives to " + slot_name(decision.owner[index], servers));
    return false;
  }
  if (!carries_push(h.command) || !report_on_last_push_) return true;
  const auto expected = decision.partitions_of(slot) * static_cast<std::uint64_t>(workload_.workers());
  if (++pushes_routed_[h.iteration] == expected) {
    pushes_routed_.erase(h.iteration);
    LbReport report = monitor_.take(h.iteration);
    const auto& missing = options_.missing_measurements;
    if (std::find(missing.begin(), missing.end(), h.iteration) != missing.end())
      report = LbReport{h.iteration, 0, 0, {}};
    Message out;
    out.header.recipient = kSchedulerId;
    out.header.command = Command::kLbReport;
    out.payload = encode_report(report);
    rt_.send(std::move(out));
    book_.forget_before(h.iteration);
  }
  return true;
}

}  // namespace pstwin
