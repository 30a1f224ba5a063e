#include "core/assert.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>

namespace pstwin {

namespace {
std::mutex& context_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::string& context() {
  static std::string text;
  return text;
}
}  // namespace

void set_assertion_context(std::string text) {
  const std::lock_guard lock(context_mutex());
  context() = std::move(text);
}

void assertion_failed(std::string_view condition, std::string_view what, const char* file, int line) {
  // One write, so lines of other threads cannot interleave with it; no allocation-free guarantee is
  // needed: the process is about to abort either way.
  std::string text = "pstwin: assertion failed at " + std::string(file) + ":" + std::to_string(line) + ": " +
                     std::string(condition) + ": " + std::string(what) + "\n";
  {
    const std::lock_guard lock(context_mutex());
    if (!context().empty()) text += "  " + context() + "\n";
  }
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace pstwin
