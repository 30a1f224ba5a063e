// Reference-counted, zero-copy payloads. A payload is either real bytes (shared, sliceable),
// a phantom (only a size, for large-scale simulation), or a live view of a shared-memory region
// whose bytes are read only when the transport actually transmits it (BytePS's zero-copy push).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace pstwin {

// Owned, 64-byte aligned byte storage. Mutable through the shared_ptr its creator keeps;
// everybody else sees it through a const Payload.
class ByteBuffer {
 public:
  explicit ByteBuffer(std::size_t size);
  // For a caller that writes every float of floats() at once (a 1 MB push is filled right after):
  // only the bytes past the last whole float and the padding are zeroed, so contents stay
  // deterministic without a memset of the whole buffer (10 % of a 1 MB loopback run's cycles).
  struct ForOverwrite {};
  ByteBuffer(std::size_t size, ForOverwrite);
  // A copy of `bytes` (written once: not zeroed first).
  explicit ByteBuffer(std::span<const std::byte> bytes);
  // Wraps memory owned elsewhere (a shared-memory mapping): `release` runs once, when the buffer goes.
  ByteBuffer(std::byte* external, std::size_t size, std::function<void()> release);
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;

  std::size_t size() const { return size_; }
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  std::span<std::byte> bytes() { return {data_.get(), size_}; }
  std::span<const std::byte> bytes() const { return {data_.get(), size_}; }
  std::span<float> floats() { return {reinterpret_cast<float*>(data_.get()), size_ / sizeof(float)}; }
  std::span<const float> floats() const {
    return {reinterpret_cast<const float*>(data_.get()), size_ / sizeof(float)};
  }

 private:
  struct AlignedFree {
    std::function<void()> external_release;  // set for wrapped memory, which is not ours to free
    void* allocation;                        // ours: what malloc returned (data is aligned inside it)
    void operator()(std::byte* p) const;
  };
  // Aligned storage of at least `size` bytes (padded to the alignment) taken from plain malloc.
  void allocate(std::size_t size);
  std::size_t size_;
  std::unique_ptr<std::byte[], AlignedFree> data_;
};

class Payload {
 public:
  Payload() = default;  // empty real payload

  static Payload phantom(std::uint64_t size);
  static Payload copy_of(std::span<const std::byte> bytes);
  static Payload adopt(std::shared_ptr<const ByteBuffer> buffer);
  // Bytes are read from `region` when the payload is frozen (at transmission), not now.
  static Payload live_view(std::shared_ptr<const ByteBuffer> region);

  std::uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  bool is_phantom() const { return kind_ == Kind::kPhantom; }
  bool is_live() const { return kind_ == Kind::kLive; }

  // Real or live payloads only; a phantom has no bytes.
  std::span<const std::byte> bytes() const;
  std::span<const float> floats() const;

  Payload slice(std::uint64_t offset, std::uint64_t length) const;
  // A live view becomes an owned snapshot of the region's current bytes; others are returned as is.
  Payload frozen() const;
  // For a consumer about to overwrite the bytes (a server taking the first push of a round as the
  // round's sum): the buffer itself when this real payload covers all of it and no other Payload or
  // owner shares it, and this payload is left empty; nullptr (and this payload untouched) otherwise.
  std::shared_ptr<ByteBuffer> take_sole_buffer();

 private:
  enum class Kind : std::uint8_t { kReal, kPhantom, kLive };
  Kind kind_ = Kind::kReal;
  std::shared_ptr<const ByteBuffer> storage_;
  std::uint64_t offset_ = 0;
  std::uint64_t size_ = 0;
};

}  // namespace pstwin
