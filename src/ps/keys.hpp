// Tensor partitioning and key -> server assignment, as BytePS does: a declared tensor is cut into
// BYTEPS_PARTITION_BYTES pieces with keys (declared_key << 16) + i, and each key goes to
// hash(key) % num_servers with djb2 over the key's decimal text by default.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "scenario/scenario.hpp"

namespace pstwin {

struct PartitionSpec {
  std::uint64_t key = 0;
  int tensor = 0;            // declared tensor index (its declared key)
  std::uint32_t part = 0;    // index within the tensor
  std::uint64_t offset = 0;  // byte offset within the tensor
  std::uint64_t bytes = 0;
  std::int32_t priority = 0;  // higher goes first; earlier layers are higher (BytePS: -declared_key)
  int server_rank = 0;
};

constexpr std::uint64_t partition_key(std::uint64_t declared_key, std::uint32_t part) {
  return (declared_key << 16) + part;
}

std::uint64_t hash_djb2(std::uint64_t key);
std::uint64_t hash_sdbm(std::uint64_t key);
int server_for_key(std::uint64_t key, int num_servers, KeyHash hash);

// Partitions in push order: by priority (descending), then key (ascending) to break ties.
std::vector<PartitionSpec> partition_tensors(std::span<const std::uint64_t> tensor_bytes,
                                             std::uint64_t partition_bytes, int num_servers, KeyHash hash);

}  // namespace pstwin
