// A ps-lite application message (ps::Message) in one pstwin frame: Command::kApp, app and customer
// ids, the response flag, timestamp (key) and priority in the header; the rest in the payload:
//   u8 flags (1 push, 2 pull, 4 simple_app) | i32 head | u32 body bytes | body
//   | u32 segments | u64 bytes of each segment | the segments' bytes
#pragma once

#include <optional>
#include <string>

#include "core/message.hpp"
#include "ps/internal/message.h"

namespace pstwin::pslite {

// Throws std::invalid_argument naming the field when the message cannot be carried (an app or
// customer id outside 0..65535).
Message to_wire(const ps::Message& message);
// Empty, with `error` naming what is wrong, for a malformed frame; `sender` is the header's.
std::optional<ps::Message> from_wire(const Message& frame, std::string& error);

}  // namespace pstwin::pslite
