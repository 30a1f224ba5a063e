// The worker side of push_pull: tensors declared by name get keys in declaration order (as BytePS's
// declare_tensor), each tensor cut into partitions of at most `partition_bytes` that go to the
// servers in turn, and every push_pull is one ps-lite ZPushPull per partition straight from and into
// the caller's memory. Completion is a handle the caller polls or waits on.
#pragma once

#include <ps/ps.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "torch/element_type.hpp"

namespace pstwin::torch {

// One declared tensor: its shape on the wire and the key of each partition.
struct DeclaredTensor {
  std::size_t index = 0;  // declaration order
  ElementType type = ElementType::kFloat32;
  std::size_t bytes = 0;  // 0 until its first push_pull fixes it
  std::vector<ps::Key> keys;
  std::vector<std::size_t> offsets;  // byte offset of each partition; offsets.back() + last size = bytes
};

// Names to keys, deterministically, as BytePS: partition p of the i-th tensor declared goes to server
// (i + p) mod S with key = that server's range begin + (i << 16) + p. Every worker must declare the
// same names in the same order (DistributedOptimizer and broadcast_parameters do).
class TensorRegistry {
 public:
  TensorRegistry(std::size_t partition_bytes, std::vector<ps::Range> server_ranges);

  std::size_t declare(const std::string& name);
  // The tensor `name` for a push_pull of `bytes` of `type`; fixes its partitions on first use and
  // throws std::invalid_argument when a later use differs from the first.
  const DeclaredTensor& layout(const std::string& name, ElementType type, std::size_t bytes);
  std::size_t size() const { return by_name_.size(); }

 private:
  std::size_t partition_bytes_;
  std::vector<ps::Range> server_ranges_;
  std::map<std::string, DeclaredTensor> by_name_;
};

class PushPullWorker {
 public:
  // ps::Start must have run; partition_bytes comes from BYTEPS_PARTITION_BYTES (parse_partition_bytes).
  explicit PushPullWorker(std::size_t partition_bytes);
  ~PushPullWorker();
  PushPullWorker(const PushPullWorker&) = delete;
  PushPullWorker& operator=(const PushPullWorker&) = delete;

  std::size_t declare(const std::string& name) { return registry_.declare(name); }
  // Starts summing `data` (whole elements of `type`) over every worker into the same memory, which
  // must stay alive and untouched until wait() returns for the handle.
  int start(const std::string& name, ElementType type, std::span<std::byte> data);
  bool done(int handle) const;
  // Blocks until the handle's sums arrived, then forgets the handle.
  void wait(int handle);
  // Waits for every handle still open.
  void wait_all();

 private:
  struct Operation {
    std::string name;
    std::vector<int> timestamps;
    std::unique_ptr<std::vector<ps::SArray<char>>> outputs;  // stable addresses for ZPushPull
    std::shared_ptr<std::atomic<int>> remaining;
  };
  const Operation& operation(int handle) const;

  TensorRegistry registry_;
  ps::KVWorker<char> worker_;
  mutable std::mutex mutex_;
  int next_handle_ = 1;
  std::map<int, Operation> operations_;
};

// BYTEPS_PARTITION_BYTES's value (nullptr: the default, 4096000); throws std::invalid_argument naming
// the variable, its value and the fix.
std::size_t parse_partition_bytes(const char* value);

}  // namespace pstwin::torch
