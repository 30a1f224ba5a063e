#include "core/codec.hpp"

#include <isa-l/crc.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>

namespace pstwin {

namespace {

// Explicit byte-by-byte packing: the wire is little-endian whatever the host is.
template <std::size_t N, typename T>
void put_le(std::array<std::byte, N>& out, std::size_t offset, T value) {
  using U = std::make_unsigned_t<T>;
  auto v = static_cast<U>(value);
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    out[offset + i] = static_cast<std::byte>(v & 0xFFu);
    if constexpr (sizeof(U) > 1) v = static_cast<U>(v >> 8);
  }
}

template <typename U>
U get_le(std::span<const std::byte> in, std::size_t offset) {
  U v = 0;
  for (std::size_t i = sizeof(U); i-- > 0;) {
    v = static_cast<U>((static_cast<std::uint64_t>(v) << 8) | std::to_integer<std::uint8_t>(in[offset + i]));
  }
  return v;
}

// CRC-32 (the zlib/IEEE polynomial: same values as zlib's crc32) from Intel's ISA-L, which picks
// its AVX-512 carry-less-multiply kernel at run time where the CPU has one: 30-39 GB/s on the
// project's VM against libdeflate's 8 (docs/PERFORMANCE.md, "Epoll van 1 MB"). Every payload byte of
// the real backend is checksummed once when sent and once when received.
// ISA-L's AVX-512 kernels return without VZEROUPPER, and legacy-SSE code run after them (our scalar
// float loops are built for baseline x86-64) then stalls on the dirty upper register state: the
// workload's fill of a 1 MiB push ran 4x slower. Clearing it costs one instruction.
#if defined(__x86_64__)
[[gnu::target("avx")]] void clear_upper_vector_state() {
  _mm256_zeroupper();
}
bool has_avx() {
  static const bool avx = (__builtin_cpu_init(), __builtin_cpu_supports("avx"));
  return avx;
}
#endif

// `crc`: that of the bytes before these (0 for none), as zlib's crc32(crc, ...).
std::uint32_t crc32_of(std::span<const std::byte> bytes, std::uint32_t crc = 0) {
  crc = crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
#if defined(__x86_64__)
  if (has_avx()) clear_upper_vector_state();
#endif
  return crc;
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", static_cast<unsigned>(v));
  return buf;
}

constexpr std::size_t kOffMagic = 0, kOffVersion = 4, kOffFlags = 5, kOffCommand = 6, kOffSender = 8,
                      kOffRecipient = 12, kOffAppId = 16, kOffCustomerId = 18, kOffPriority = 20,
                      kOffSequence = 24, kOffIteration = 32, kOffPartition = 36, kOffKey = 40,
                      kOffPayloadLength = 48, kOffPayloadCrc = 56, kOffHeaderCrc = 60;
constexpr std::uint8_t kKnownFlags = kFlagResponse | kFlagPhantom | kFlagCrcTrailer;

DecodeError error(std::string field, std::string detail) {
  return {std::move(field), std::move(detail)};
}

}  // namespace

std::uint32_t payload_crc32(std::span<const std::byte> bytes) {
  return crc32_of(bytes);
}

std::uint32_t payload_crc32_extend(std::uint32_t crc, std::span<const std::byte> bytes) {
  return crc32_of(bytes, crc);
}

HeaderBytes encode_header(const MessageHeader& header, const Payload& payload, bool compute_crc) {
  // A live view is read here, at transmission, which is exactly its contract.
  const bool crc = compute_crc && !payload.is_phantom();
  return encode_header_with_crc(header, payload, crc ? crc32_of(payload.bytes()) : 0);
}

namespace {

HeaderBytes encode(const MessageHeader& header, const Payload& payload, std::uint32_t payload_crc,
                   bool crc_trailer) {
  const bool phantom = payload.is_phantom();
  std::uint8_t flags = 0;
  if (header.is_response) flags |= kFlagResponse;
  if (phantom) flags |= kFlagPhantom;
  if (crc_trailer && !phantom) flags |= kFlagCrcTrailer;
  const std::uint32_t crc = phantom || crc_trailer ? 0 : payload_crc;

  HeaderBytes out{};
  put_le(out, kOffMagic, kWireMagic);
  put_le(out, kOffVersion, kWireVersion);
  put_le(out, kOffFlags, flags);
  put_le(out, kOffCommand, static_cast<std::uint16_t>(header.command));
  put_le(out, kOffSender, header.sender);
  put_le(out, kOffRecipient, header.recipient);
  put_le(out, kOffAppId, header.app_id);
  put_le(out, kOffCustomerId, header.customer_id);
  put_le(out, kOffPriority, header.priority);
  put_le(out, kOffSequence, header.sequence);
  put_le(out, kOffIteration, header.iteration);
  put_le(out, kOffPartition, header.partition);
  put_le(out, kOffKey, header.key);
  put_le(out, kOffPayloadLength, payload.size());
  put_le(out, kOffPayloadCrc, crc);
  put_le(out, kOffHeaderCrc, crc32_of(std::span<const std::byte>(out).first(kOffHeaderCrc)));
  return out;
}

}  // namespace

HeaderBytes encode_header_with_crc(const MessageHeader& header, const Payload& payload,
                                   std::uint32_t payload_crc) {
  return encode(header, payload, payload_crc, false);
}

HeaderBytes encode_header_crc_trailer(const MessageHeader& header, const Payload& payload) {
  return encode(header, payload, 0, true);
}

TrailerBytes encode_crc_trailer(std::uint32_t payload_crc) {
  TrailerBytes out{};
  put_le(out, 0, payload_crc);
  return out;
}

std::uint32_t decode_crc_trailer(std::span<const std::byte, kTrailerBytes> bytes) {
  return get_le<std::uint32_t>(bytes, 0);
}

std::optional<DecodeError> decode_header(std::span<const std::byte> bytes, MessageHeader& out, bool& phantom,
                                         const DecodeLimits& limits) {
  FrameShape shape;
  if (auto err = decode_header(bytes, out, shape, limits)) return err;
  if (shape.crc_trailer) {
    return error("flags",
                 "bit " + hex32(kFlagCrcTrailer) +
                     " (CRC after the payload) is for a stream van (epoll); this van carries the CRC in "
                     "the header");
  }
  phantom = shape.phantom;
  return std::nullopt;
}

std::optional<DecodeError> decode_header(std::span<const std::byte> bytes, MessageHeader& out,
                                         FrameShape& shape, const DecodeLimits& limits) {
  if (bytes.size() < kHeaderBytes) {
    return error("header", "received " + std::to_string(bytes.size()) + " bytes, a header needs " +
                               std::to_string(kHeaderBytes));
  }
  const auto magic = get_le<std::uint32_t>(bytes, kOffMagic);
  if (magic != kWireMagic) {
    return error("magic", "expected " + hex32(kWireMagic) + ", got " + hex32(magic));
  }
  const auto version = get_le<std::uint8_t>(bytes, kOffVersion);
  if (version != kWireVersion) {
    return error("version", "expected " + std::to_string(kWireVersion) + ", got " + std::to_string(version));
  }
  const auto header_crc = get_le<std::uint32_t>(bytes, kOffHeaderCrc);
  const std::uint32_t computed = crc32_of(bytes.first(kOffHeaderCrc));
  if (header_crc != computed) {
    return error("header_crc", "header says " + hex32(header_crc) + ", bytes 0..59 give " + hex32(computed));
  }
  const auto flags = get_le<std::uint8_t>(bytes, kOffFlags);
  if ((flags & ~kKnownFlags) != 0) {
    return error("flags", "unknown flag bits " + hex32(flags & ~kKnownFlags) + " in " + hex32(flags));
  }
  const bool phantom = (flags & kFlagPhantom) != 0;
  const bool crc_trailer = (flags & kFlagCrcTrailer) != 0;
  if (phantom && crc_trailer) {
    return error("flags", "a phantom payload (" + hex32(kFlagPhantom) + ") has no bytes for a CRC trailer (" +
                              hex32(kFlagCrcTrailer) + ") to check, in " + hex32(flags));
  }
  const auto command = get_le<std::uint16_t>(bytes, kOffCommand);
  if (command < 1 || command > kMaxCommand) {
    return error("command",
                 "command " + std::to_string(command) + " is outside 1.." + std::to_string(kMaxCommand));
  }
  const auto payload_length = get_le<std::uint64_t>(bytes, kOffPayloadLength);
  if (payload_length > limits.max_payload_bytes) {
    return error("payload_length", "announces " + std::to_string(payload_length) + " bytes, limit is " +
                                       std::to_string(limits.max_payload_bytes));
  }
  const auto payload_crc = get_le<std::uint32_t>(bytes, kOffPayloadCrc);
  if (crc_trailer && payload_crc != 0) {
    return error("payload_crc", "must be 0 where the CRC follows the payload (flag " +
                                    hex32(kFlagCrcTrailer) + "), is " + hex32(payload_crc));
  }

  // Only a fully valid header reaches the caller's output.
  MessageHeader h;
  h.sender = static_cast<NodeId>(get_le<std::uint32_t>(bytes, kOffSender));
  h.recipient = static_cast<NodeId>(get_le<std::uint32_t>(bytes, kOffRecipient));
  h.app_id = get_le<std::uint16_t>(bytes, kOffAppId);
  h.customer_id = get_le<std::uint16_t>(bytes, kOffCustomerId);
  h.command = static_cast<Command>(command);
  h.is_response = (flags & kFlagResponse) != 0;
  h.priority = static_cast<std::int32_t>(get_le<std::uint32_t>(bytes, kOffPriority));
  h.sequence = get_le<std::uint64_t>(bytes, kOffSequence);
  h.iteration = get_le<std::uint32_t>(bytes, kOffIteration);
  h.partition = get_le<std::uint32_t>(bytes, kOffPartition);
  h.key = get_le<std::uint64_t>(bytes, kOffKey);
  h.payload_length = payload_length;
  h.payload_crc = payload_crc;
  out = h;
  shape = {phantom, crc_trailer};
  return std::nullopt;
}

std::optional<DecodeError> decode_frame(std::span<const std::byte> frame, Message& out,
                                        const DecodeLimits& limits) {
  MessageHeader header;
  FrameShape shape;
  if (auto err = decode_header(frame, header, shape, limits)) return err;

  const std::uint64_t carried = frame.size() - kHeaderBytes;
  if (shape.phantom) {
    if (carried != 0) {
      return error("payload_length",
                   "phantom frame must carry no bytes but carries " + std::to_string(carried));
    }
    if (header.payload_crc != 0) {
      return error("payload_crc", "phantom frame must have CRC 0, has " + hex32(header.payload_crc));
    }
    out.header = header;
    out.payload = Payload::phantom(header.payload_length);
    return std::nullopt;
  }
  const std::uint64_t trailer = shape.crc_trailer ? kTrailerBytes : 0;
  if (carried != header.payload_length + trailer) {
    return error("payload_length", "header says " + std::to_string(header.payload_length) + " bytes" +
                                       (trailer > 0 ? " and a 4-byte CRC after them" : "") +
                                       " but frame carries " + std::to_string(carried));
  }
  const std::span<const std::byte> body = frame.subspan(kHeaderBytes, header.payload_length);
  const std::uint32_t crc = crc32_of(body);
  const std::uint32_t expected =
      shape.crc_trailer ? decode_crc_trailer(frame.last<kTrailerBytes>()) : header.payload_crc;
  if (crc != expected) {
    return error("payload_crc", std::string(shape.crc_trailer ? "trailer" : "header") + " says " +
                                    hex32(expected) + ", payload gives " + hex32(crc));
  }
  out.header = header;
  out.payload = Payload::copy_of(body);
  return std::nullopt;
}

std::string encode_frame(const Message& message, bool crc_trailer) {
  // Snapshot a live view once so the CRC and the bytes that follow it agree.
  const Payload payload = message.payload.frozen();
  const bool trailer = crc_trailer && !payload.is_phantom();
  const HeaderBytes header =
      trailer ? encode_header_crc_trailer(message.header, payload) : encode_header(message.header, payload);
  std::string frame;
  const std::span<const std::byte> body =
      payload.is_phantom() ? std::span<const std::byte>{} : payload.bytes();
  frame.resize(kHeaderBytes + body.size() + (trailer ? kTrailerBytes : 0));
  auto* out = reinterpret_cast<std::byte*>(frame.data());
  std::copy(header.begin(), header.end(), out);
  std::copy(body.begin(), body.end(), out + kHeaderBytes);
  if (trailer) {
    const TrailerBytes crc = encode_crc_trailer(crc32_of(body));
    std::copy(crc.begin(), crc.end(), out + kHeaderBytes + body.size());
  }
  return frame;
}

std::string_view command_name(Command command) {
  switch (command) {
    case Command::kRegister:
      return "register";
    case Command::kNodeTable:
      return "node_table";
    case Command::kBarrier:
      return "barrier";
    case Command::kHeartbeat:
      return "heartbeat";
    case Command::kPush:
      return "push";
    case Command::kPull:
      return "pull";
    case Command::kWorkerDone:
      return "worker_done";
    case Command::kShutdown:
      return "shutdown";
    case Command::kFatal:
      return "fatal";
    case Command::kPushPull:
      return "push_pull";
    case Command::kLbReport:
      return "lb_report";
    case Command::kLbDecision:
      return "lb_decision";
    case Command::kAck:
      return "ack";
    case Command::kWorkerLost:
      return "worker_lost";
    case Command::kApp:
      return "app";
    case Command::kLocalReduce:
      return "local_reduce";
  }
  return "unknown";
}

}  // namespace pstwin
