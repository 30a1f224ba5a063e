// A worker's key-value client (ps-lite's KVWorker): pushes and pulls of partitions, the scheduling
// credit and routing by decision. The iteration driver (Worker, worker.hpp) decides what to push and
// when; this class decides where it goes and when it may leave.
//   credit:  at most ps.scheduling_credit partitions are pushed and unacknowledged at once (0: no
//            limit); with ps.balancing = "lb" the credit counts per aggregator, so a slow server's
//            unacknowledged pushes never hold back the others'. Staged partitions waiting for credit
//            leave highest priority first (ByteScheduler's credit-based preemption), equal priorities
//            in staging order (a sequence number, never the key).
//   routing: a partition goes to its hashed server, or to the aggregator the iteration's decision
//            names (ps.balancing = "lb": a server, or a worker with lb.worker_aggregators).
//   fused:   ps.push_pull = "fused" sends one push_pull per partition, whose reply is the aggregate;
//            "separate" pulls a partition once its push is acknowledged.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/message.hpp"
#include "core/payload.hpp"
#include "core/runtime.hpp"
#include "ps/balance.hpp"
#include "ps/workload.hpp"

namespace pstwin {

struct KvClientOptions {
  int servers = 1;
  int scheduling_credit = 0;  // 0: no limit
  bool fused = false;         // ps.push_pull = "fused"
  int rank = -1;              // the worker's rank, for its trace spans
};

class KvClient {
 public:
  // Writes a synthetic push's values for (partition, iteration) into the buffer given.
  using Fill = std::function<void(const PartitionSpec&, std::uint32_t, std::span<float>)>;

  // `decisions` (null: hash routing), `push_stage`, `workload` and `fill` must outlive the client.
  KvClient(Runtime& runtime, KvClientOptions options, const SyntheticWorkload& workload,
           const DecisionBook* decisions, Executor& push_stage, Fill fill);

  // The iteration whose requests are sent from now on (their header and their decision).
  void set_iteration(std::uint32_t iteration) { iteration_ = iteration; }
  // A staged partition, pushed once the credit lets it leave.
  // `buffer`: the staging buffer it was copied into ("": none), named in the push's trace span.
  void push(const PartitionSpec& partition, Payload payload, std::string buffer = {});
  // A synthetic partition whose values are written when it leaves, as iteration `iteration`'s: filling
  // every push when staged wrote a whole model of cold buffers per iteration (about 7 % of a 1 MiB
  // loopback run's CPU).
  void push_filled_on_release(const PartitionSpec& partition, std::uint32_t iteration);
  // A pull without a push (RoundPlan: a dropped tensor, or a round this worker sits out).
  void pull(const PartitionSpec& partition);
  // A push's acknowledgement (separate mode): its credit back, then the pull of its aggregate. False
  // (and nothing done) for an acknowledgement of no push in flight: a duplicated or forged message.
  bool on_push_ack(const Message& ack);
  // A push_pull's reply (fused mode): its credit back. False as on_push_ack.
  bool on_push_pull_reply(const Message& reply) { return release_credit(reply); }
  // The aggregator slot (see balance.hpp) `partition` goes to in the current iteration.
  int destination(const PartitionSpec& partition) const;
  int in_flight() const { return in_flight_; }
  std::size_t waiting_for_credit() const { return ready_.size(); }

 private:
  void send(NodeId to, Command command, const PartitionSpec& partition, Payload payload = {});
  bool release_credit(const Message& ack);
  void dispatch();

  Runtime& rt_;
  const KvClientOptions options_;
  const SyntheticWorkload& workload_;
  const DecisionBook* decisions_;
  Executor& push_stage_;
  Fill fill_;
  std::uint32_t iteration_ = 0;
  struct Ready {
    const PartitionSpec* partition;
    Payload payload;
    std::string buffer;
  };
  // Staged partitions waiting for credit, by (-priority, staging sequence).
  std::map<std::pair<std::int32_t, std::uint64_t>, Ready> ready_;
  std::uint64_t staged_sequence_ = 0;
  // push_filled_on_release: by staging sequence, the iteration whose values the push carries.
  std::map<std::uint64_t, std::uint32_t> fill_on_release_;
  int in_flight_ = 0;
  std::map<int, int> in_flight_to_;  // per aggregator slot (the credit's unit with ps.balancing = "lb")
  // Keys pushed and not yet acknowledged, with the aggregator each went to: an acknowledgement of
  // anything else is a copy (a duplicated message) and returns no credit.
  std::map<std::uint64_t, NodeId> unacked_;
  // Each push in flight (sent, not yet acknowledged) as its trace span will show it: from the credit
  // letting it go to its acknowledgement, the time its staging buffer must stay untouched. Spans that
  // overlap go on lanes of their own ("push 0", "push 1", ...), each the lowest one free.
  struct InFlight {
    Seconds since = 0;
    int lane = 0;
    SpanTags tags;
  };
  std::map<std::uint64_t, InFlight> in_flight_spans_;
  std::vector<bool> push_lanes_busy_;
};

}  // namespace pstwin
