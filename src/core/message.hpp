// One protocol message: a fixed header plus a zero-copy payload. The wire layout is in codec.hpp.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/payload.hpp"
#include "core/types.hpp"

namespace pstwin {

enum class Command : std::uint16_t {
  kRegister = 1,     // node -> scheduler: role, rank wish, address
  kNodeTable = 2,    // scheduler -> all: the id/role/rank/address table
  kBarrier = 3,      // node -> scheduler (request), scheduler -> node (response = release); key = group
  kHeartbeat = 4,    // node -> scheduler
  kPush = 5,         // worker -> server; response = ack
  kPull = 6,         // worker -> server; response carries the value
  kWorkerDone = 7,   // worker -> scheduler: all iterations finished
  kShutdown = 8,     // scheduler -> node (request), node -> scheduler (response = ack)
  kFatal = 9,        // any -> scheduler: a node hit an unrecoverable error (payload: text)
  kPushPull = 10,    // worker -> server: a push whose response carries the aggregate (ps-lite's ZPushPull)
  kLbReport = 11,    // server/worker -> scheduler: one iteration's bandwidth measurements (ps.balancing = lb)
  kLbDecision = 12,  // scheduler -> servers, workers: partition owners from an iteration on
  kAck = 13,         // ps.resend: receiver -> sender, key = the acknowledged message's sequence
  kWorkerLost = 14,  // scheduler -> servers, workers (ps.on_worker_loss = continue): key = the lost node's id
  kApp = 15,  // any -> any: a ps-lite API application's message (src/pslite), payload in its own encoding
  // ps.local_reduce: worker -> its host's root (request: my partition `key` of `iteration` is staged),
  // root -> worker (response: the host's aggregate of it is staged)
  kLocalReduce = 16,
};
inline constexpr std::uint16_t kMaxCommand = 16;

std::string_view command_name(Command command);

struct MessageHeader {
  NodeId sender = kNoNode;
  NodeId recipient = kNoNode;
  std::uint16_t app_id = 0;
  std::uint16_t customer_id = 0;
  Command command = Command::kHeartbeat;
  bool is_response = false;
  std::int32_t priority = 0;
  std::uint64_t sequence = 0;  // per-sender message sequence (ps-lite's timestamp)
  std::uint32_t iteration = 0;
  std::uint32_t partition = 0;
  std::uint64_t key = 0;
  std::uint64_t payload_length = 0;  // filled by the codec from the payload
  std::uint32_t payload_crc = 0;     // filled by the codec; 0 for phantom payloads

  friend bool operator==(const MessageHeader&, const MessageHeader&) = default;
};

struct Message {
  MessageHeader header;
  Payload payload;
};

}  // namespace pstwin
