#include "cli/data_files.hpp"

#include <filesystem>
#include <system_error>

namespace pstwin::cli {

std::string data_file(std::string_view relative) {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const auto installed = self.parent_path() / PSTWIN_DATA_FROM_BIN / relative;
    if (std::filesystem::exists(installed, error)) return installed.lexically_normal().string();
  }
  return (std::filesystem::path(PSTWIN_SOURCE_DIR) / relative).string();
}

}  // namespace pstwin::cli
