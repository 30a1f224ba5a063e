#include "ps/staging.hpp"

namespace pstwin {

std::string staging_buffer_name(StagingNaming naming, std::string_view job, Role role, int rank,
                                std::uint64_t key) {
  if (naming == StagingNaming::kLegacyKeyOnly) return "BytePS_ShM_" + std::to_string(key);
  return "pstwin_" + std::string(job) + "_" + std::string(role_name(role)) + "_" + std::to_string(rank) +
         "_" + std::to_string(key);
}

}  // namespace pstwin
