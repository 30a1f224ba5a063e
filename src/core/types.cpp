#include "core/types.hpp"

namespace pstwin {

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kScheduler:
      return "scheduler";
    case Role::kServer:
      return "server";
    case Role::kWorker:
      return "worker";
    case Role::kValidator:
      return "validator";
  }
  return "unknown";
}

}  // namespace pstwin
