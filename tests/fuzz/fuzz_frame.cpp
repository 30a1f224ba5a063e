// libFuzzer target: the wire decoder every van runs on bytes from the network (decode_header,
// decode_frame). The first input byte picks a mode; in the "fixed" modes the target rewrites the
// header and payload CRCs (the trailer where the flags announce one) so that the fuzzer gets past
// them to the checks behind. A frame that decodes must encode back to the same bytes (for a real
// payload) and decode again to the same message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "core/codec.hpp"

namespace {

void put_u32(std::vector<std::byte>& bytes, std::size_t offset, std::uint32_t value) {
  for (std::size_t i = 0; i < 4; ++i) bytes[offset + i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
}

void require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  std::vector<std::byte> bytes(size - 1);
  if (size > 1) std::memcpy(bytes.data(), data + 1, size - 1);
  const bool fix_crcs = (mode & 1) != 0;
  if (fix_crcs && bytes.size() >= pstwin::kHeaderBytes) {
    // Magic and version right half of the time too, so the rest of the header is explored.
    if ((mode & 2) != 0) {
      put_u32(bytes, 0, pstwin::kWireMagic);
      bytes[4] = std::byte{pstwin::kWireVersion};
    }
    const auto payload = std::span<const std::byte>(bytes).subspan(pstwin::kHeaderBytes);
    if ((mode & 8) != 0) {  // the length the frame carries
      const std::uint64_t length = payload.size();
      put_u32(bytes, 48, static_cast<std::uint32_t>(length));
      put_u32(bytes, 52, static_cast<std::uint32_t>(length >> 32));
    }
    const bool phantom = (std::to_integer<std::uint8_t>(bytes[5]) & pstwin::kFlagPhantom) != 0;
    const bool crc_trailer = (std::to_integer<std::uint8_t>(bytes[5]) & pstwin::kFlagCrcTrailer) != 0;
    if (crc_trailer && payload.size() >= pstwin::kTrailerBytes) {
      // The CRC after the payload: the last 4 bytes, the header's field 0.
      const auto body = payload.first(payload.size() - pstwin::kTrailerBytes);
      put_u32(bytes, bytes.size() - pstwin::kTrailerBytes, pstwin::payload_crc32(body));
      put_u32(bytes, 56, 0);
    } else {
      put_u32(bytes, 56, phantom ? 0 : pstwin::payload_crc32(payload));
    }
    put_u32(bytes, 60, pstwin::payload_crc32(std::span<const std::byte>(bytes).first(60)));
  }
  // A small limit in some modes: the payload_length check is reached with short inputs.
  const pstwin::DecodeLimits limits{(mode & 4) != 0 ? std::uint64_t{64} : std::uint64_t{4} << 30};

  pstwin::MessageHeader header;
  pstwin::FrameShape shape;
  const auto header_error = pstwin::decode_header(bytes, header, shape, limits);
  require(!header_error || !header_error->field.empty());
  // The header-CRC vans' form: the same verdict, except that it refuses a CRC trailer.
  bool phantom = false;
  const auto carried_error = pstwin::decode_header(bytes, header, phantom, limits);
  require(carried_error.has_value() == (header_error.has_value() || shape.crc_trailer));

  pstwin::Message message;
  const auto frame_error = pstwin::decode_frame(bytes, message, limits);
  if (frame_error) {
    require(!frame_error->field.empty());
    return 0;
  }
  require(!header_error);  // a frame that decodes has a header that decodes
  // Round trip: what decoded encodes to a frame that decodes to the same message.
  const std::string again = pstwin::encode_frame(message, shape.crc_trailer);
  pstwin::Message twice;
  const auto again_error =
      pstwin::decode_frame(std::as_bytes(std::span<const char>(again.data(), again.size())), twice, limits);
  require(!again_error);
  require(twice.header.key == message.header.key && twice.header.sequence == message.header.sequence &&
          twice.header.command == message.header.command && twice.header.sender == message.header.sender);
  require(twice.payload.size() == message.payload.size());
  if (!message.payload.is_phantom())
    require(again.size() <= bytes.size() && std::memcmp(again.data(), bytes.data(), again.size()) == 0);
  return 0;
}
