// Node ids and groups, following ps-lite so logs read the same: scheduler 1, server rank r -> 2r+8,
// worker rank r -> 2r+9. ps-lite has no room for a third role in that scheme (both parities are
// taken), so validators (ZenoPS) get their own range: validator rank r -> kValidatorIdBase + r.
#pragma once

#include <cstdint>

#include "core/types.hpp"

namespace pstwin {

inline constexpr int kSchedulerGroup = 1;
inline constexpr int kServerGroup = 2;
inline constexpr int kWorkerGroup = 4;
inline constexpr int kValidatorGroup = 8;
inline constexpr int kAllGroups = kSchedulerGroup | kServerGroup | kWorkerGroup | kValidatorGroup;
inline constexpr NodeId kValidatorIdBase = 1 << 20;
// MessageHeader::app_id of the ZenoPS flow (customer_id then carries the worker or validator rank):
// server -> validator: a worker's push to judge; validator -> server: its weighted sum for one key.
inline constexpr std::uint16_t kCandidateApp = 1;
inline constexpr std::uint16_t kVerdictApp = 2;

// Registrants have no id until the node table: the scheduler's answers to them (accepted, refused) go
// through connection ids from here up, far above every server, worker and validator id.
inline constexpr NodeId kRegistrantIdBase = NodeId{1} << 30;

constexpr NodeId server_id(int rank) {
  return 2 * rank + 8;
}
constexpr NodeId worker_id(int rank) {
  return 2 * rank + 9;
}
constexpr NodeId validator_id(int rank) {
  return kValidatorIdBase + rank;
}

constexpr Role role_of(NodeId id) {
  if (id == kSchedulerId) return Role::kScheduler;
  if (id >= kValidatorIdBase) return Role::kValidator;
  return id % 2 == 0 ? Role::kServer : Role::kWorker;
}
constexpr int rank_of(NodeId id) {
  switch (role_of(id)) {
    case Role::kScheduler:
      return 0;
    case Role::kValidator:
      return id - kValidatorIdBase;
    case Role::kServer:
      return (id - 8) / 2;
    case Role::kWorker:
      return (id - 9) / 2;
  }
  return -1;
}
constexpr int group_of(Role role) {
  switch (role) {
    case Role::kScheduler:
      return kSchedulerGroup;
    case Role::kServer:
      return kServerGroup;
    case Role::kWorker:
      return kWorkerGroup;
    case Role::kValidator:
      return kValidatorGroup;
  }
  return 0;
}

}  // namespace pstwin
