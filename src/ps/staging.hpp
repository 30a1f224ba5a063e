// Names of host-local shared-memory staging buffers. BytePS named them by tensor key only
// ("BytePS_ShM_<key>"), so two workers on one host mapped the same buffer and one worker's copy-in
// raced the other's zero-copy push: the crossed-line bug. per-rank naming separates them by job,
// role and rank; legacy-key-only is kept to reproduce the bug on purpose.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/types.hpp"
#include "scenario/scenario.hpp"

namespace pstwin {

std::string staging_buffer_name(StagingNaming naming, std::string_view job, Role role, int rank,
                                std::uint64_t key);

}  // namespace pstwin
