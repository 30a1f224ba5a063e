#include "ps/kv_client.hpp"

#include <algorithm>

#include "core/assert.hpp"

namespace pstwin {

KvClient::KvClient(Runtime& runtime, KvClientOptions options, const SyntheticWorkload& workload,
                   const DecisionBook* decisions, Executor& push_stage, Fill fill)
    : rt_(runtime),
      options_(options),
      workload_(workload),
      decisions_(decisions),
      push_stage_(push_stage),
      fill_(std::move(fill)) {}

void KvClient::push(const PartitionSpec& partition, Payload payload, std::string buffer) {
  ready_.emplace(std::make_pair(-partition.priority, staged_sequence_++),
                 Ready{&partition, std::move(payload), std::move(buffer)});
  dispatch();
}

void KvClient::push_filled_on_release(const PartitionSpec& partition, std::uint32_t iteration) {
  fill_on_release_.emplace(staged_sequence_, iteration);  // the key push() gives it
  push(partition, Payload{});
}

void KvClient::pull(const PartitionSpec& partition) {
  send(slot_node(destination(partition), options_.servers), Command::kPull, partition);
}

bool KvClient::on_push_ack(const Message& ack) {
  if (!release_credit(ack)) return false;
  Message pull;
  pull.header.key = ack.header.key;
  pull.header.iteration = iteration_;
  pull.header.partition = ack.header.partition;
  pull.header.priority = ack.header.priority;
  pull.header.recipient = ack.header.sender;
  pull.header.command = Command::kPull;
  rt_.send(std::move(pull));
  return true;
}

int KvClient::destination(const PartitionSpec& partition) const {
  if (!decisions_) return partition.server_rank;
  const auto index = static_cast<std::size_t>(&partition - workload_.partitions().data());
  const LbDecision* decision = decisions_->find(iteration_);
  PSTWIN_ASSERT(decision != nullptr, "a request routed before its iteration's decision arrived");
  return decision->owner[index];
}

void KvClient::send(NodeId to, Command command, const PartitionSpec& partition, Payload payload) {
  Message message;
  message.header.key = partition.key;
  message.header.iteration = iteration_;
  message.header.partition = partition.part;
  message.header.priority = partition.priority;
  message.header.recipient = to;
  message.header.command = command;
  message.payload = std::move(payload);
  rt_.send(std::move(message));
}

bool KvClient::release_credit(const Message& ack) {
  const auto pushed = unacked_.find(ack.header.key);
  if (pushed == unacked_.end() || pushed->second != ack.header.sender) {
    rt_.log("worker: ignored an acknowledgement of key " + std::to_string(ack.header.key) + " from node " +
            std::to_string(ack.header.sender) + " with no push of it in flight (a duplicated message)");
    return false;
  }
  unacked_.erase(pushed);
  if (const auto span = in_flight_spans_.find(ack.header.key); span != in_flight_spans_.end()) {
    rt_.trace_tagged("push " + std::to_string(span->second.lane), "push", "push", span->second.since,
                     rt_.now(), span->second.tags);
    push_lanes_busy_[static_cast<std::size_t>(span->second.lane)] = false;
    in_flight_spans_.erase(span);
  }
  PSTWIN_ASSERT(in_flight_ > 0, "a push in flight that the credit does not count");
  --in_flight_;
  --in_flight_to_[slot_of(ack.header.sender, options_.servers)];
  dispatch();
  return true;
}

void KvClient::dispatch() {
  const int credit = options_.scheduling_credit;
  for (auto it = ready_.begin(); it != ready_.end() && (decisions_ || credit == 0 || in_flight_ < credit);) {
    int& to_aggregator = in_flight_to_[destination(*it->second.partition)];
    if (decisions_ && credit != 0 && to_aggregator >= credit) {
      ++it;
      continue;
    }
    auto node = ready_.extract(it++);
    ++in_flight_;
    ++to_aggregator;
    auto [partition, payload, buffer] = std::move(node.mapped());
    if (const auto unfilled = fill_on_release_.find(node.key().second); unfilled != fill_on_release_.end()) {
      auto filled = std::make_shared<ByteBuffer>(partition->bytes, ByteBuffer::ForOverwrite{});
      fill_(*partition, unfilled->second, filled->floats());
      payload = Payload::adopt(std::move(filled));
      fill_on_release_.erase(unfilled);
    }
    SpanTags tags{partition->key, iteration_, options_.rank, std::move(buffer), partition->bytes};
    auto release = [this, partition, payload = std::move(payload), tags]() mutable {
      const NodeId to = slot_node(destination(*partition), options_.servers);
      unacked_[partition->key] = to;
      const auto free = std::ranges::find(push_lanes_busy_, false);
      const auto lane = static_cast<int>(free - push_lanes_busy_.begin());
      if (free == push_lanes_busy_.end())
        push_lanes_busy_.push_back(true);
      else
        *free = true;
      auto [span, fresh] = in_flight_spans_.try_emplace(partition->key);
      // A second push of a key before the first's acknowledgement: the first's span ends unrecorded.
      if (!fresh) push_lanes_busy_[static_cast<std::size_t>(span->second.lane)] = false;
      span->second = {rt_.now(), lane, std::move(tags)};
      send(to, options_.fused ? Command::kPushPull : Command::kPush, *partition, std::move(payload));
    };
    push_stage_.submit_tagged(0, "dispatch", {}, {}, std::move(release), tags);
  }
}

}  // namespace pstwin
