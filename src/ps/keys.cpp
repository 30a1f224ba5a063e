#include "ps/keys.hpp"

#include <algorithm>
#include <string>

namespace pstwin {

std::uint64_t hash_djb2(std::uint64_t key) {
  std::uint64_t hash = 5381;
  for (char c : std::to_string(key)) hash = (hash << 5) + hash + static_cast<std::uint64_t>(c);
  return hash;
}

std::uint64_t hash_sdbm(std::uint64_t key) {
  std::uint64_t hash = 0;
  for (char c : std::to_string(key)) hash = static_cast<std::uint64_t>(c) + (hash << 6) + (hash << 16) - hash;
  return hash;
}

int server_for_key(std::uint64_t key, int num_servers, KeyHash hash) {
  const auto n = static_cast<std::uint64_t>(num_servers);
  switch (hash) {
    case KeyHash::kDjb2:
      return static_cast<int>(hash_djb2(key) % n);
    case KeyHash::kSdbm:
      return static_cast<int>(hash_sdbm(key) % n);
    case KeyHash::kNaive:
      return static_cast<int>(((key >> 16) + (key % 65536)) % n);
  }
  return 0;
}

std::vector<PartitionSpec> partition_tensors(std::span<const std::uint64_t> tensor_bytes,
                                             std::uint64_t partition_bytes, int num_servers, KeyHash hash) {
  std::vector<PartitionSpec> parts;
  for (std::size_t t = 0; t < tensor_bytes.size(); ++t) {
    std::uint32_t part = 0;
    for (std::uint64_t offset = 0; offset < tensor_bytes[t]; offset += partition_bytes, ++part) {
      PartitionSpec spec;
      spec.key = partition_key(t, part);
      spec.tensor = static_cast<int>(t);
      spec.part = part;
      spec.offset = offset;
      spec.bytes = std::min(partition_bytes, tensor_bytes[t] - offset);
      spec.priority = -static_cast<std::int32_t>(t);
      spec.server_rank = server_for_key(spec.key, num_servers, hash);
      parts.push_back(spec);
    }
  }
  std::stable_sort(parts.begin(), parts.end(), [](const PartitionSpec& a, const PartitionSpec& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.key < b.key;
  });
  return parts;
}

}  // namespace pstwin
