#include "pslite/wire.hpp"

#include <cstring>
#include <memory>
#include <stdexcept>

namespace pstwin::pslite {
namespace {

constexpr std::uint8_t kPush = 1;
constexpr std::uint8_t kPull = 2;
constexpr std::uint8_t kSimpleApp = 4;
// More than keys, values and lengths: room for an app's own, never an absurd count from a forged frame.
constexpr std::uint32_t kMaxSegments = 64;

std::uint16_t id16(int value, const char* field) {
  if (value < 0 || value > 0xFFFF)
    throw std::invalid_argument(std::string(field) + " " + std::to_string(value) +
                                " is outside 0..65535: pstwin carries it in 16 bits; use a smaller id");
  return static_cast<std::uint16_t>(value);
}

class Writer {
 public:
  explicit Writer(std::byte* out) : out_(out) {}
  template <typename T>
  void put(T value) {
    std::memcpy(out_, &value, sizeof value);
    out_ += sizeof value;
  }
  void bytes(const void* data, std::size_t size) {
    if (size > 0) std::memcpy(out_, data, size);
    out_ += size;
  }

 private:
  std::byte* out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  template <typename T>
  bool get(T& value, const char* field, std::string& error) {
    if (in_.size() - pos_ < sizeof value) return fail(field, error);
    std::memcpy(&value, in_.data() + pos_, sizeof value);
    pos_ += sizeof value;
    return true;
  }
  const std::byte* take(std::uint64_t size, const char* field, std::string& error) {
    if (in_.size() - pos_ < size) {
      fail(field, error);
      return nullptr;
    }
    const std::byte* at = in_.data() + pos_;
    pos_ += size;
    return at;
  }
  std::size_t left() const { return in_.size() - pos_; }

 private:
  bool fail(const char* field, std::string& error) {
    error = std::string("app message truncated at ") + field + " (" + std::to_string(in_.size()) + " bytes)";
    return false;
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

}  // namespace

Message to_wire(const ps::Message& message) {
  const auto& meta = message.meta;
  Message frame;
  frame.header.command = Command::kApp;
  frame.header.recipient = static_cast<NodeId>(meta.recver);
  frame.header.app_id = id16(meta.app_id, "app_id");
  frame.header.customer_id = id16(meta.customer_id, "customer_id");
  frame.header.is_response = !meta.request;
  frame.header.key = static_cast<std::uint32_t>(meta.timestamp);
  frame.header.priority = meta.priority;
  std::size_t size = 1 + 4 + 4 + meta.body.size() + 4 + 8 * message.data.size();
  for (const auto& segment : message.data) size += segment.size();
  auto buffer = std::make_shared<ByteBuffer>(size, ByteBuffer::ForOverwrite{});
  Writer out(buffer->data());
  out.put(static_cast<std::uint8_t>((meta.push ? kPush : 0) | (meta.pull ? kPull : 0) |
                                    (meta.simple_app ? kSimpleApp : 0)));
  out.put(static_cast<std::int32_t>(meta.head));
  out.put(static_cast<std::uint32_t>(meta.body.size()));
  out.bytes(meta.body.data(), meta.body.size());
  out.put(static_cast<std::uint32_t>(message.data.size()));
  for (const auto& segment : message.data) out.put(static_cast<std::uint64_t>(segment.size()));
  for (const auto& segment : message.data) out.bytes(segment.data(), segment.size());
  frame.payload = Payload::adopt(std::move(buffer));
  return frame;
}

std::optional<ps::Message> from_wire(const Message& frame, std::string& error) {
  if (frame.payload.is_phantom()) {
    error = "app message without bytes (a phantom payload)";
    return std::nullopt;
  }
  Reader in(frame.payload.bytes());
  ps::Message message;
  auto& meta = message.meta;
  meta.app_id = frame.header.app_id;
  meta.customer_id = frame.header.customer_id;
  meta.request = !frame.header.is_response;
  meta.timestamp = static_cast<int>(static_cast<std::uint32_t>(frame.header.key));
  meta.priority = frame.header.priority;
  meta.sender = static_cast<int>(frame.header.sender);
  meta.recver = static_cast<int>(frame.header.recipient);
  std::uint8_t flags = 0;
  std::int32_t head = 0;
  std::uint32_t body_bytes = 0;
  if (!in.get(flags, "flags", error) || !in.get(head, "head", error) ||
      !in.get(body_bytes, "body length", error))
    return std::nullopt;
  if (flags & ~(kPush | kPull | kSimpleApp)) {
    error = "app message with unknown flags " + std::to_string(flags);
    return std::nullopt;
  }
  meta.push = flags & kPush;
  meta.pull = flags & kPull;
  meta.simple_app = flags & kSimpleApp;
  meta.head = head;
  const std::byte* body = in.take(body_bytes, "body", error);
  if (!body) return std::nullopt;
  meta.body.assign(reinterpret_cast<const char*>(body), body_bytes);
  std::uint32_t segments = 0;
  if (!in.get(segments, "segment count", error)) return std::nullopt;
  if (segments > kMaxSegments) {
    error = "app message with " + std::to_string(segments) + " segments (at most " +
            std::to_string(kMaxSegments) + ")";
    return std::nullopt;
  }
  std::vector<std::uint64_t> sizes(segments);
  for (auto& size : sizes)
    if (!in.get(size, "segment length", error)) return std::nullopt;
  for (std::uint64_t size : sizes) {
    const std::byte* bytes = in.take(size, "segment", error);
    if (!bytes) return std::nullopt;
    ps::SArray<char> segment;
    segment.CopyFrom(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(size));
    message.data.push_back(segment);
  }
  if (in.left() != 0) {
    error = "app message with " + std::to_string(in.left()) + " trailing bytes";
    return std::nullopt;
  }
  return message;
}

}  // namespace pstwin::pslite
