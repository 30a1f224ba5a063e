// Versioned little-endian wire format for message headers.
//
// offset size field              offset size field
//  0     4   magic "PSTW"         24     8   sequence
//  4     1   version (1)          32     4   iteration
//  5     1   flags                36     4   partition
//  6     2   command              40     8   key
//  8     4   sender               48     8   payload_length
// 12     4   recipient            56     4   payload_crc (CRC-32 of the payload; 0 if phantom)
// 16     2   app_id               60     4   header_crc  (CRC-32 of bytes 0..59)
// 18     2   customer_id
// 20     4   priority
// flags: bit 0 = response, bit 1 = phantom payload (length is simulated, no bytes follow),
// bit 2 = CRC trailer: payload_crc is 0 and the payload's CRC-32 follows the payload in 4 bytes.
// A frame is the 64-byte header followed by payload_length bytes (none for phantoms), then the
// trailer where bit 2 says so. A stream van (epoll) sends a large payload with the trailer so that
// it can checksum each piece just before the kernel copies it, while the piece is in cache; the
// message-based vans (ZeroMQ, UCX) carry the CRC in the header and refuse a trailer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/message.hpp"

namespace pstwin {

inline constexpr std::size_t kHeaderBytes = 64;
inline constexpr std::uint32_t kWireMagic = 0x57545350;  // "PSTW" little-endian
inline constexpr std::uint8_t kWireVersion = 1;
inline constexpr std::uint8_t kFlagResponse = 0x1;
inline constexpr std::uint8_t kFlagPhantom = 0x2;
inline constexpr std::uint8_t kFlagCrcTrailer = 0x4;
inline constexpr std::size_t kTrailerBytes = 4;

struct DecodeLimits {
  std::uint64_t max_payload_bytes = std::uint64_t{4} << 30;  // refuse frames announcing more than 4 GiB
};

// Why a frame was rejected: the header field at fault and a human-readable explanation.
struct DecodeError {
  std::string field;
  std::string detail;
  std::string to_string() const { return field + ": " + detail; }
};

using HeaderBytes = std::array<std::byte, kHeaderBytes>;
using TrailerBytes = std::array<std::byte, kTrailerBytes>;

// What a header's flags say follows it.
struct FrameShape {
  bool phantom = false;      // no bytes follow (payload_length is simulated)
  bool crc_trailer = false;  // payload_length bytes, then the payload's CRC-32 (payload_crc is 0)
};

// Fills payload_length/payload_crc from `payload` and writes the header. Computing the CRC reads
// the payload; pass compute_crc=false where a transport checks integrity itself.
HeaderBytes encode_header(const MessageHeader& header, const Payload& payload, bool compute_crc = true);
// The same with the payload's CRC already known (payload_crc32 of its bytes; ignored for a phantom):
// a payload sent to several peers is checksummed once.
HeaderBytes encode_header_with_crc(const MessageHeader& header, const Payload& payload,
                                   std::uint32_t payload_crc);

// A header for a payload whose CRC-32 follows it (kFlagCrcTrailer; payload_crc 0): the sender
// checksums the payload piece by piece as it writes it and sends encode_crc_trailer(crc) after it.
// A phantom payload has nothing to check: its header is encode_header's.
HeaderBytes encode_header_crc_trailer(const MessageHeader& header, const Payload& payload);
TrailerBytes encode_crc_trailer(std::uint32_t payload_crc);
std::uint32_t decode_crc_trailer(std::span<const std::byte, kTrailerBytes> bytes);

// Validates and decodes the first 64 bytes. Checks magic, version, header CRC, flags, command,
// payload CRC against the flags and the payload-length limit. Never reads past `bytes`, never
// allocates for the payload.
std::optional<DecodeError> decode_header(std::span<const std::byte> bytes, MessageHeader& out,
                                         FrameShape& shape, const DecodeLimits& limits = {});
// The same for a van that carries the CRC in the header: a frame with a CRC trailer is refused
// (field "flags").
std::optional<DecodeError> decode_header(std::span<const std::byte> bytes, MessageHeader& out, bool& phantom,
                                         const DecodeLimits& limits = {});

// Decodes a whole frame (header + payload bytes, + the CRC trailer where the flags say so). The
// payload is copied into a fresh buffer only after every check passed, so a hostile length cannot
// make it allocate.
std::optional<DecodeError> decode_frame(std::span<const std::byte> frame, Message& out,
                                        const DecodeLimits& limits = {});

// Encodes header + payload (+ trailer) into one contiguous frame (tests, tools; transports use
// writev). `crc_trailer`: the CRC follows the payload (ignored for a phantom).
std::string encode_frame(const Message& message, bool crc_trailer = false);

std::uint32_t payload_crc32(std::span<const std::byte> bytes);
// The CRC of a payload read in pieces: payload_crc32_extend(payload_crc32(a), b) == payload_crc32(a + b).
std::uint32_t payload_crc32_extend(std::uint32_t crc, std::span<const std::byte> bytes);

}  // namespace pstwin
