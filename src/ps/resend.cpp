#include "ps/resend.hpp"

#include <sstream>

#include "ps/control.hpp"
#include "ps/ids.hpp"

namespace pstwin {

Resender::Resender(Runtime& inner, Options options) : inner_(inner), options_(std::move(options)) {}

bool Resender::tracked(const MessageHeader& header) {
  // Acks are not acknowledged (ps-lite: Control::ACK); a lost heartbeat is replaced by the next one;
  // a node without an id (registering) has no signature yet, as ps-lite's resender starts after the
  // node table.
  return header.command != Command::kAck && header.command != Command::kHeartbeat &&
         header.sender != kNoNode && !accepted_registration(header);
}

bool Resender::accepted_registration(const MessageHeader& header) {
  // Not needed either: the node table, sent to the node's id once every node has registered,
  // supersedes it. Tracked, a registrant that crashed after registering would leave it unacknowledged
  // at a connection id that no worker loss names.
  return header.command == Command::kRegister && header.is_response && header.key == kRegistrationAccepted;
}

void Resender::send(Message message) {
  if (message.header.command == Command::kWorkerLost) forget(static_cast<NodeId>(message.header.key));
  if (self() == kNoNode || message.header.command == Command::kHeartbeat ||
      accepted_registration(message.header) || lost_.contains(message.header.recipient)) {
    inner_.send(std::move(message));
    return;
  }
  const std::uint64_t sequence = inner_.next_sequence();
  message.header.sequence = sequence;
  message.header.sender = self();
  // A live view is read at transmission; the kept copy must hold the bytes sent, not later ones.
  Message kept{message.header, message.payload.is_live() ? message.payload.frozen() : message.payload};
  const TimerId timer = inner_.start_timer(options_.timeout, [this, sequence] { timed_out(sequence); });
  pending_.emplace(sequence, Pending{std::move(kept), now(), 0, timer});
  inner_.send_numbered(std::move(message));
}

void Resender::timed_out(std::uint64_t sequence) {
  auto it = pending_.find(sequence);
  if (it == pending_.end() || stopped_) return;
  auto& entry = it->second;
  const auto& h = entry.message.header;
  if (stop_requested_ && entry.resends >= kLingerResends) {
    // We are stopping and the peer stays silent: it has most likely stopped too (its ack was lost).
    ++counts_.given_up;  // counted in results.json, not logged: routine when an ack was lost at the end
    pending_.erase(it);
    maybe_stop();
    return;
  }
  const bool scheduler_decides = options_.workers_may_be_lost && role_of(h.recipient) == Role::kWorker;
  if (!stop_requested_ && !scheduler_decides && now() - entry.first_sent >= options_.give_up_after) {
    std::ostringstream out;
    out << options_.label << ": no acknowledgement from node " << h.recipient << " for "
        << command_name(h.command) << (h.is_response ? " response" : "") << " (sequence " << h.sequence;
    if (FaultPlan::is_data(h.command)) out << ", key " << h.key << ", iteration " << h.iteration;
    out << ") after " << entry.resends << " resends over " << now() - entry.first_sent
        << " s (ps.resend_timeout = " << options_.timeout
        << " s): the peer is unreachable (a partition longer than ps.heartbeat_timeout?) or dead";
    inner_.fail(out.str());
    return;
  }
  ++entry.resends;
  ++counts_.resent;
  inner_.send_numbered(Message{entry.message});
  entry.timer = inner_.start_timer(options_.timeout, [this, sequence] { timed_out(sequence); });
}

void Resender::acked(std::uint64_t sequence) {
  auto it = pending_.find(sequence);
  if (it == pending_.end()) return;  // a second ack (of a resend, or a duplicated ack)
  inner_.cancel_timer(it->second.timer);
  pending_.erase(it);
  maybe_stop();
}

void Resender::acknowledge(const MessageHeader& header) {
  Message ack;
  ack.header.recipient = header.sender;
  ack.header.command = Command::kAck;
  ack.header.key = header.sequence;
  ++counts_.acks;
  inner_.send(std::move(ack));
}

bool Resender::first_time(const MessageHeader& header) {
  auto& seen = seen_[header.sender];
  if (header.sequence <= seen.floor || !seen.recent.insert(header.sequence).second) return false;
  if (seen.recent.size() > kSeenWindow) {
    seen.floor = *seen.recent.begin();
    seen.recent.erase(seen.recent.begin());
  }
  return true;
}

void Resender::on_message(Message message) {
  const auto& h = message.header;
  if (h.command == Command::kAck) {
    acked(h.key);
    return;
  }
  if (tracked(h)) {
    acknowledge(h);  // even a copy: the ack of the first may be the one that was lost
    if (!first_time(h)) {
      ++counts_.duplicates_dropped;
      return;
    }
  }
  if (stop_requested_) return;  // the protocol has stopped; we only linger for acks
  if (h.command == Command::kWorkerLost && h.sender == kSchedulerId) forget(static_cast<NodeId>(h.key));
  protocol_->on_message(std::move(message));
}

void Resender::forget(NodeId peer) {
  lost_.insert(peer);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.message.header.recipient != peer) {
      ++it;
      continue;
    }
    inner_.cancel_timer(it->second.timer);
    ++counts_.given_up;
    it = pending_.erase(it);
  }
  maybe_stop();
}

void Resender::stop() {
  stop_requested_ = true;
  maybe_stop();
}

void Resender::maybe_stop() {
  if (!stop_requested_ || stopped_ || !pending_.empty()) return;
  stopped_ = true;
  inner_.stop();
}

std::string Resender::describe_state() const {
  std::string state = stop_requested_ ? "stopped, lingering for acks" : protocol_->describe_state();
  if (!pending_.empty()) state += "; " + std::to_string(pending_.size()) + " message(s) unacknowledged";
  return state;
}

void add_resend_counts(const Node* node, FaultCounts& into) {
  const auto* resender = dynamic_cast<const Resender*>(node);
  if (!resender) return;
  into.resent += resender->counts().resent;
  into.duplicates_dropped += resender->counts().duplicates_dropped;
  into.acks += resender->counts().acks;
  into.given_up += resender->counts().given_up;
}

std::unique_ptr<Node> with_resend(Runtime& rt, const Scenario& scenario, std::string label,
                                  const std::function<std::unique_ptr<Node>(Runtime&)>& make) {
  if (!scenario.resend_enabled()) return make(rt);
  auto resender = std::make_unique<Resender>(
      rt, Resender::Options{scenario.ps.resend_timeout_s,
                            scenario.ps.heartbeat_timeout_s + 2 * scenario.ps.heartbeat_interval_s,
                            std::move(label), scenario.ps.continues_on_worker_loss()});
  resender->wrap(make(*resender));
  return resender;
}

}  // namespace pstwin
