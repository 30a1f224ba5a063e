#include "fpt/send_pool.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include "core/codec.hpp"

namespace pstwin::fpt {

std::uint64_t wire_bytes(const Message& message) {
  return kHeaderBytes + message.payload.size();
}

bool is_control(const Message& message) {
  return message.payload.empty();
}

SendPool::SendPool(SendPoolOptions options) : options_(options) {
  if (options_.quantum_bytes == 0) options_.quantum_bytes = SendPoolOptions{}.quantum_bytes;
}

std::optional<std::string> SendPool::validate(const SendPoolOptions& options) {
  if (options.quantum_bytes == 0) {
    return "quantum_bytes is 0: the DRR quantum must be at least 1 byte (64 KiB is a good default)";
  }
  if (!(options.link_rate_Bps >= 0) || std::isinf(options.link_rate_Bps)) {
    return "link_rate_Bps is " + std::to_string(options.link_rate_Bps) +
           ": give the sender's link rate in bytes/s, or 0 for no pacing";
  }
  return std::nullopt;
}

double SendPool::pacing_rate(NodeId id) const {
  return shaped_rate(options_.link_rate_Bps, weights_, id);
}

SendPool::Destination& SendPool::destination(NodeId id) {
  auto [it, made] = destinations_.try_emplace(id);
  if (made) {
    it->second.weight = weight_of(weights_, id);
    it->second.stats.weight = it->second.weight;
  }
  return it->second;
}

std::optional<std::string> SendPool::enqueue(NodeId destination_id, Message message) {
  if (destination_id == kNoNode) {
    return "enqueue: destination is kNoNode (" + std::to_string(kNoNode) +
           "): connect the peer and pass its node id";
  }
  Destination& d = destination(destination_id);
  const std::uint64_t bytes = wire_bytes(message);
  d.stats.queued_messages += 1;
  d.stats.queued_bytes += bytes;
  ++queued_messages_;
  const std::uint64_t sequence = next_sequence_++;
  if (is_control(message)) {
    control_.emplace(sequence, std::pair{destination_id, std::move(message)});
    return std::nullopt;
  }
  const std::int32_t priority = message.header.priority;
  d.data.emplace(std::pair{priority, sequence}, std::move(message));
  activate(destination_id, d);
  return std::nullopt;
}

void SendPool::activate(NodeId id, Destination& d) {
  if (d.active || d.blocked || d.paced || d.data.empty()) return;
  d.active = true;
  if (std::exchange(d.interrupted_round, std::nullopt) == rounds_) {
    d.visited = true;  // the visit goes on where blocking cut it off
    active_.push_front(id);
    ++visits_left_;
    return;
  }
  d.visited = false;
  active_.push_back(id);  // joins at the tail: visited from the next round on
}

void SendPool::account_sent(Destination& d, const Message& message) {
  const std::uint64_t bytes = wire_bytes(message);
  d.stats.queued_messages -= 1;
  d.stats.queued_bytes -= bytes;
  d.stats.sent_messages += 1;
  d.stats.sent_bytes += bytes;
  --queued_messages_;
}

void SendPool::end_visit() {
  const NodeId id = active_.front();
  active_.pop_front();
  if (visits_left_ > 0) --visits_left_;
  Destination& d = destinations_.at(id);
  d.visited = false;
  if (d.data.empty()) d.deficit = 0;  // an idle destination keeps no credit (classic DRR)
  if (!d.data.empty() && !d.blocked && !d.paced) {
    active_.push_back(id);
  } else {
    d.active = false;
  }
}

void SendPool::apply_pending_weights() {
  if (!pending_weights_) return;
  active_version_ = pending_weights_->first;
  weights_ = std::move(pending_weights_->second);
  pending_weights_.reset();
  for (auto& [id, d] : destinations_) {
    d.weight = weight_of(weights_, id);
    d.stats.weight = d.weight;
  }
}

void SendPool::start_round_if_due() {
  if (visits_left_ > 0 || active_.empty()) return;
  ++rounds_;
  apply_pending_weights();
  visits_left_ = active_.size();
  // If no destination could send even after this round's quanta, skip the empty rounds at once
  // (a huge message behind a small quantum): exactly what running them one by one would do.
  std::uint64_t skip = UINT64_MAX;
  for (const NodeId id : active_) {
    const Destination& d = destinations_.at(id);
    const std::uint64_t quantum = options_.quantum_bytes * d.weight;
    const std::uint64_t have = d.deficit + quantum;
    const std::uint64_t need = wire_bytes(d.data.begin()->second);
    if (need <= have) return;
    skip = std::min(skip, (need - have + quantum - 1) / quantum);
  }
  for (const NodeId id : active_) {
    Destination& d = destinations_.at(id);
    d.deficit += skip * options_.quantum_bytes * d.weight;
  }
  rounds_ += skip;
}

std::optional<Outgoing> SendPool::next() {
  // Control first, in enqueue order, skipping destinations whose connection cannot take more now.
  for (auto it = control_.begin(); it != control_.end(); ++it) {
    Destination& d = destinations_.at(it->second.first);
    if (d.blocked) continue;
    auto node = control_.extract(it);
    auto& [id, message] = node.mapped();
    account_sent(d, message);
    return Outgoing{id, std::move(message)};
  }
  while (!active_.empty()) {
    start_round_if_due();
    const NodeId id = active_.front();
    Destination& d = destinations_.at(id);
    if (!d.visited) {
      d.deficit += options_.quantum_bytes * d.weight;
      d.visited = true;
    }
    const auto head = d.data.begin();
    const std::uint64_t cost = wire_bytes(head->second);
    if (cost <= d.deficit) {
      d.deficit -= cost;
      Message message = std::move(head->second);
      d.data.erase(head);
      account_sent(d, message);
      if (d.data.empty()) end_visit();
      return Outgoing{id, std::move(message)};
    }
    end_visit();
  }
  return std::nullopt;
}

std::optional<std::string> SendPool::set_weights(std::uint64_t version, std::span<const PeerWeight> weights) {
  const std::uint64_t newest = pending_weights_ ? pending_weights_->first : active_version_;
  WeightTable table;
  if (auto error = check_weights(version, newest, weights, table)) return error;
  pending_weights_.emplace(version, std::move(table));
  if (active_.empty()) apply_pending_weights();  // no round is running: the next one starts with them
  return std::nullopt;
}

void SendPool::set_blocked(NodeId id, bool blocked) {
  Destination& d = destination(id);
  if (d.blocked == blocked) return;
  d.blocked = blocked;
  follow_holds(id, d);
}

void SendPool::set_paced(NodeId id, bool paced) {
  Destination& d = destination(id);
  if (d.paced == paced) return;
  d.paced = paced;
  follow_holds(id, d);
}

void SendPool::follow_holds(NodeId id, Destination& d) {
  if (!d.blocked && !d.paced) {
    activate(id, d);
    return;
  }
  if (!d.active) return;
  const auto it = std::find(active_.begin(), active_.end(), id);
  if (it == active_.begin() && d.visited) d.interrupted_round = rounds_;
  if (static_cast<std::size_t>(std::distance(active_.begin(), it)) < visits_left_) --visits_left_;
  active_.erase(it);
  d.active = false;
  d.visited = false;
}

std::vector<Message> SendPool::drop(NodeId id) {
  std::vector<Message> dropped;
  const auto found = destinations_.find(id);
  if (found == destinations_.end()) return dropped;
  Destination& d = found->second;
  for (auto it = control_.begin(); it != control_.end();) {
    if (it->second.first == id) {
      dropped.push_back(std::move(it->second.second));
      it = control_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [key, message] : d.data) dropped.push_back(std::move(message));
  d.data.clear();
  queued_messages_ -= d.stats.queued_messages;
  d.stats.queued_messages = 0;
  d.stats.queued_bytes = 0;
  d.deficit = 0;
  d.interrupted_round.reset();
  if (d.active) {
    const auto it = std::find(active_.begin(), active_.end(), id);
    if (static_cast<std::size_t>(std::distance(active_.begin(), it)) < visits_left_) --visits_left_;
    active_.erase(it);
    d.active = false;
    d.visited = false;
  }
  return dropped;
}

DestinationStats SendPool::stats(NodeId id) const {
  const auto it = destinations_.find(id);
  if (it == destinations_.end()) {
    DestinationStats zero;
    zero.weight = weight_of(weights_, id);
    return zero;
  }
  return it->second.stats;
}

}  // namespace pstwin::fpt
