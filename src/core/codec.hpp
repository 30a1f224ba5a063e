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
// flags: bit 0 = response, bit 1 = phantom payload (length is simulated, no bytes follow).
// A frame is the 64-byte header followed by payload_length bytes (none for phantoms).
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

// Fills payload_length/payload_crc from `payload` and writes the header. Computing the CRC reads
// the payload; pass compute_crc=false where a transport checks integrity itself.
HeaderBytes encode_header(const MessageHeader& header, const Payload& payload, bool compute_crc = true);
// The same with the payload's CRC already known (payload_crc32 of its bytes; ignored for a phantom):
// a payload sent to several peers is checksummed once.
HeaderBytes encode_header_with_crc(const MessageHeader& header, const Payload& payload,
                                   std::uint32_t payload_crc);

// Validates and decodes the first 64 bytes. Checks magic, version, flags, command, header CRC
// and the payload-length limit. Never reads past `bytes`, never allocates for the payload.
std::optional<DecodeError> decode_header(std::span<const std::byte> bytes, MessageHeader& out, bool& phantom,
                                         const DecodeLimits& limits = {});

// Decodes a whole frame (header + payload bytes). The payload is copied into a fresh buffer
// only after every check passed, so a hostile length cannot make it allocate.
std::optional<DecodeError> decode_frame(std::span<const std::byte> frame, Message& out,
                                        const DecodeLimits& limits = {});

// Encodes header + payload into one contiguous frame (tests, tools; transports use writev).
std::string encode_frame(const Message& message);

std::uint32_t payload_crc32(std::span<const std::byte> bytes);
// The CRC of a payload read in pieces: payload_crc32_extend(payload_crc32(a), b) == payload_crc32(a + b).
std::uint32_t payload_crc32_extend(std::uint32_t crc, std::span<const std::byte> bytes);

}  // namespace pstwin
