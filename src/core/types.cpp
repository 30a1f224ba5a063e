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

std::optional<Role> role_from_name(std::string_view name) {
  for (Role role : {Role::kScheduler, Role::kServer, Role::kWorker, Role::kValidator})
    if (role_name(role) == name) return role;
  return std::nullopt;
}

}  // namespace pstwin
