#include "core/payload.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace pstwin {

namespace {

constexpr std::size_t kAlignment = 64;  // one cache line; also enough for any SIMD load

// A multiple of the alignment, and > 0.
std::size_t padded_size(std::size_t size) {
  if (size > SIZE_MAX - 2 * kAlignment) throw std::bad_alloc();
  const std::size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  return rounded == 0 ? kAlignment : rounded;
}

}  // namespace

void ByteBuffer::AlignedFree::operator()(std::byte* /*aligned*/) const {
  if (external_release)
    external_release();
  else
    std::free(allocation);
}

// Not std::aligned_alloc: glibc's memalign splits the alignment slack off as a separate free chunk,
// which lands in the thread cache and keeps a freed megabyte from coalescing, so a loop that frees
// and reallocates a 1 MiB buffer grew the heap by about 1 MiB per iteration and faulted in fresh
// pages each time (docs/PERFORMANCE.md, "Epoll van on loopback"). A plain malloc with the slack
// inside is freed whole.
void ByteBuffer::allocate(std::size_t size) {
  const std::size_t padded = padded_size(size);
  void* raw = std::malloc(padded + kAlignment);
  if (raw == nullptr) throw std::bad_alloc();
  const auto address = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (address + kAlignment - 1) / kAlignment * kAlignment;
  data_ =
      std::unique_ptr<std::byte[], AlignedFree>(reinterpret_cast<std::byte*>(aligned), AlignedFree{{}, raw});
}

ByteBuffer::ByteBuffer(std::byte* external, std::size_t size, std::function<void()> release)
    : size_(size), data_(external, AlignedFree{std::move(release), nullptr}) {
  if (external == nullptr) throw std::invalid_argument("ByteBuffer: wrapped memory is null");
}

ByteBuffer::ByteBuffer(std::size_t size) : size_(size) {
  allocate(size);
  // Zeroed so that a buffer nobody filled still hashes and transmits deterministically.
  std::memset(data_.get(), 0, padded_size(size));
}

ByteBuffer::ByteBuffer(std::size_t size, ForOverwrite) : size_(size) {
  allocate(size);
  const std::size_t written = size / sizeof(float) * sizeof(float);
  std::memset(data_.get() + written, 0, padded_size(size) - written);
}

ByteBuffer::ByteBuffer(std::span<const std::byte> bytes) : size_(bytes.size()) {
  allocate(size_);
  const std::size_t padded = padded_size(size_);
  if (!bytes.empty()) std::memcpy(data_.get(), bytes.data(), bytes.size());
  std::memset(data_.get() + size_, 0, padded - size_);  // only the padding: as deterministic as above
}

Payload Payload::phantom(std::uint64_t size) {
  Payload p;
  p.kind_ = Kind::kPhantom;
  p.size_ = size;
  return p;
}

Payload Payload::copy_of(std::span<const std::byte> bytes) {
  if (bytes.empty()) return Payload{};
  return adopt(std::make_shared<ByteBuffer>(bytes));
}

Payload Payload::adopt(std::shared_ptr<const ByteBuffer> buffer) {
  Payload p;
  if (buffer) {
    p.size_ = buffer->size();
    p.storage_ = std::move(buffer);
  }
  return p;
}

Payload Payload::live_view(std::shared_ptr<const ByteBuffer> region) {
  Payload p = adopt(std::move(region));
  p.kind_ = Kind::kLive;
  return p;
}

std::span<const std::byte> Payload::bytes() const {
  if (is_phantom()) {
    throw std::logic_error("Payload::bytes(): a phantom payload of " + std::to_string(size_) +
                           " bytes has no bytes");
  }
  if (!storage_) return {};
  return {storage_->data() + offset_, static_cast<std::size_t>(size_)};
}

std::span<const float> Payload::floats() const {
  if (is_phantom()) {
    throw std::logic_error("Payload::floats(): a phantom payload of " + std::to_string(size_) +
                           " bytes has no floats");
  }
  // Reading floats from a misaligned or ragged region would be undefined behaviour, not a rounding.
  if (size_ % sizeof(float) != 0 || offset_ % alignof(float) != 0) {
    throw std::logic_error("Payload::floats(): payload (offset " + std::to_string(offset_) + ", size " +
                           std::to_string(size_) + ") is not a whole, aligned float array");
  }
  const std::span<const std::byte> raw = bytes();
  return {reinterpret_cast<const float*>(raw.data()), raw.size() / sizeof(float)};
}

Payload Payload::slice(std::uint64_t offset, std::uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    throw std::out_of_range("Payload::slice(offset " + std::to_string(offset) + ", length " +
                            std::to_string(length) + ") exceeds payload size " + std::to_string(size_));
  }
  Payload p = *this;  // shares storage_: a slice never copies bytes
  p.offset_ = offset_ + offset;
  p.size_ = length;
  return p;
}

std::shared_ptr<ByteBuffer> Payload::take_sole_buffer() {
  // use_count() == 1 is a safe test here: we hold the only reference, so no other thread can copy it.
  if (kind_ != Kind::kReal || !storage_ || storage_.use_count() != 1 || offset_ != 0 ||
      size_ != storage_->size())
    return nullptr;
  // Every ByteBuffer is created mutable (its creator holds it as such); a Payload only shares it as
  // const, and nobody shares it any more.
  auto buffer = std::const_pointer_cast<ByteBuffer>(std::move(storage_));
  *this = Payload{};
  return buffer;
}

Payload Payload::frozen() const {
  if (!is_live()) return *this;
  return copy_of(bytes());
}

}  // namespace pstwin
