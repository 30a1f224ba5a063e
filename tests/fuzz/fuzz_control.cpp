// libFuzzer target: the bodies of control messages a node decodes from its peers (registration,
// node table, load-balancer decision and report, fatal text). The first byte picks the decoder.
// Whatever decodes must encode back to a body that decodes to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "core/payload.hpp"
#include "ps/balance.hpp"
#include "ps/control.hpp"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

template <typename Decode, typename Encode>
void round_trip(const pstwin::Payload& body, Decode decode, Encode encode) {
  std::string error;
  const auto value = decode(body, error);
  if (!value) {
    require(!error.empty());
    return;
  }
  std::string again_error;
  const auto again = decode(encode(*value), again_error);
  require(again.has_value() && *again == *value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto body = pstwin::Payload::copy_of(std::as_bytes(std::span(data + 1, size - 1)));
  switch (data[0] % 5) {
    case 0:
      round_trip(body, pstwin::decode_node_info, pstwin::encode_node_info);
      break;
    case 1: {
      round_trip(body, pstwin::decode_node_table, pstwin::encode_node_table);
      // The views a node reads must agree with the table, entry by entry, and refuse what it refuses.
      std::string error;
      std::string view_error;
      const auto table = pstwin::decode_node_table(body, error);
      const auto views = pstwin::decode_node_table_views(body, view_error);
      require(table.has_value() == views.has_value() && error == view_error);
      if (table) {
        require(table->size() == views->size());
        for (std::size_t i = 0; i < table->size(); ++i)
          require((*table)[i].id == (*views)[i].id && (*table)[i].role == (*views)[i].role &&
                  (*table)[i].rank == (*views)[i].rank && (*table)[i].address == (*views)[i].address &&
                  (*table)[i].host == (*views)[i].host);
      }
      break;
    }
    case 2:
      round_trip(body, pstwin::decode_decision, pstwin::encode_decision);
      break;
    case 3:
      round_trip(body, pstwin::decode_report, pstwin::encode_report);
      break;
    default:
      (void)pstwin::decode_text(body);
      break;
  }
  return 0;
}
