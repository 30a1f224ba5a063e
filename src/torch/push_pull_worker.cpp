#include "torch/push_pull_worker.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace pstwin::torch {

namespace {

constexpr std::size_t kDefaultPartitionBytes = 4096000;  // BytePS's default
constexpr std::size_t kMaxPartitionBytes = std::size_t{1} << 30;
constexpr std::size_t kMaxPartitions = std::size_t{1} << 16;  // the low 16 bits of a key

}  // namespace

std::size_t parse_partition_bytes(const char* value) {
  if (value == nullptr) return kDefaultPartitionBytes;
  const std::string_view text(value);
  std::size_t bytes = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), bytes);
  if (error != std::errc() || end != text.data() + text.size() || bytes < 8 || bytes > kMaxPartitionBytes) {
    throw std::invalid_argument("BYTEPS_PARTITION_BYTES='" + std::string(text) +
                                "' is not a whole number of bytes from 8 to " +
                                std::to_string(kMaxPartitionBytes) +
                                "; fix: set it to such a number (the default is 4096000) or unset it");
  }
  return bytes;
}

TensorRegistry::TensorRegistry(std::size_t partition_bytes, std::vector<ps::Range> server_ranges)
    : partition_bytes_(partition_bytes), server_ranges_(std::move(server_ranges)) {}

std::size_t TensorRegistry::declare(const std::string& name) {
  const auto [it, fresh] = by_name_.try_emplace(name);
  if (fresh) it->second.index = by_name_.size() - 1;
  return it->second.index;
}

const DeclaredTensor& TensorRegistry::layout(const std::string& name, ElementType type, std::size_t bytes) {
  DeclaredTensor& tensor = by_name_.at(name);
  if (tensor.bytes != 0) {
    if (tensor.type != type || tensor.bytes != bytes) {
      throw std::invalid_argument("push_pull '" + name + "': " + std::to_string(bytes) + " bytes of " +
                                  std::string(element_name(type)) + ", but its first push_pull had " +
                                  std::to_string(tensor.bytes) + " bytes of " +
                                  std::string(element_name(tensor.type)) +
                                  "; fix: give tensors of another size or type a name of their own");
    }
    return tensor;
  }
  // Whole elements per partition, so a server never sums half an element.
  const std::size_t element = element_size(type);
  const std::size_t step = std::max(element, partition_bytes_ / element * element);
  tensor.type = type;
  tensor.bytes = bytes;
  if ((bytes + step - 1) / step > kMaxPartitions) {
    throw std::invalid_argument("push_pull '" + name + "': " + std::to_string(bytes) +
                                " bytes make more than " + std::to_string(kMaxPartitions) +
                                " partitions of " + std::to_string(step) +
                                " bytes; fix: raise BYTEPS_PARTITION_BYTES");
  }
  for (std::size_t offset = 0, p = 0; offset < bytes; offset += step, ++p) {
    const ps::Range& range = server_ranges_[(tensor.index + p) % server_ranges_.size()];
    tensor.keys.push_back(range.begin() + (std::uint64_t{tensor.index} << 16) + p);
    tensor.offsets.push_back(offset);
  }
  return tensor;
}

PushPullWorker::PushPullWorker(std::size_t partition_bytes)
    : registry_(partition_bytes, ps::Postoffice::Get()->GetServerKeyRanges()), worker_(0, 0) {}

PushPullWorker::~PushPullWorker() {
  wait_all();
}

int PushPullWorker::start(const std::string& name, ElementType type, std::span<std::byte> data) {
  if (data.empty()) throw std::invalid_argument("push_pull '" + name + "': the tensor has no elements");
  const std::lock_guard lock(mutex_);
  for (const auto& [handle, op] : operations_) {
    if (op.name == name) {
      throw std::invalid_argument("push_pull '" + name + "': handle " + std::to_string(handle) +
                                  " of the same name is still open; fix: synchronize it first");
    }
  }
  registry_.declare(name);
  const DeclaredTensor& tensor = registry_.layout(name, type, data.size());
  Operation op;
  op.name = name;
  const std::size_t parts = tensor.keys.size();
  op.outputs = std::make_unique<std::vector<ps::SArray<char>>>();
  op.outputs->reserve(parts);
  op.remaining = std::make_shared<std::atomic<int>>(static_cast<int>(parts));
  char* base = reinterpret_cast<char*>(data.data());
  for (std::size_t p = 0; p < parts; ++p) {
    const std::size_t end = p + 1 < parts ? tensor.offsets[p + 1] : tensor.bytes;
    const std::size_t length = end - tensor.offsets[p];
    // Borrowed, not owned: the push is copied into its frame when sent, and the pulled sum lands
    // straight in the caller's memory.
    const ps::SArray<char> values(base + tensor.offsets[p], length, false);
    op.outputs->emplace_back(base + tensor.offsets[p], length, false);
    op.timestamps.push_back(worker_.ZPushPull(ps::SArray<ps::Key>{tensor.keys[p]}, values,
                                              &op.outputs->back(), nullptr, static_cast<int>(type),
                                              [remaining = op.remaining] { --*remaining; }));
  }
  const int handle = next_handle_++;
  operations_.emplace(handle, std::move(op));
  return handle;
}

const PushPullWorker::Operation& PushPullWorker::operation(int handle) const {
  const auto it = operations_.find(handle);
  if (it == operations_.end()) {
    throw std::invalid_argument("handle " + std::to_string(handle) +
                                " is not an open push_pull (already synchronized, or never returned)");
  }
  return it->second;
}

bool PushPullWorker::done(int handle) const {
  const std::lock_guard lock(mutex_);
  return operation(handle).remaining->load() == 0;
}

void PushPullWorker::wait(int handle) {
  std::vector<int> timestamps;
  {
    const std::lock_guard lock(mutex_);
    timestamps = operation(handle).timestamps;
  }
  for (const int ts : timestamps) worker_.Wait(ts);
  const std::lock_guard lock(mutex_);
  operations_.erase(handle);
}

void PushPullWorker::wait_all() {
  std::vector<int> handles;
  {
    const std::lock_guard lock(mutex_);
    for (const auto& entry : operations_) handles.push_back(entry.first);
  }
  for (const int handle : handles) wait(handle);
}

}  // namespace pstwin::torch
