// Logging and checks for ps-lite applications (ps-lite takes them from dmlc-core): CHECK, CHECK_EQ,
// CHECK_NE, CHECK_LT, CHECK_LE, CHECK_GT, CHECK_GE, CHECK_NOTNULL, LOG(INFO|WARNING|ERROR|FATAL) and LL.
// A failed check prints its values and aborts, as dmlc-core's does.
#ifndef PS_INTERNAL_UTILS_H_
#define PS_INTERNAL_UTILS_H_

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

namespace ps {
namespace detail {

enum class Severity { INFO, WARNING, ERROR, FATAL };

// One log line, written to stderr whole when the statement ends; FATAL then aborts.
class LogLine {
 public:
  LogLine(const char* file, int line, Severity severity) : severity_(severity) {
    const char* base = std::strrchr(file, '/');
    stream_ << "[ps] " << (base ? base + 1 : file) << ":" << line << ": ";
  }
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  ~LogLine() {
    stream_ << '\n';
    std::cerr << stream_.str() << std::flush;
    if (severity_ == Severity::FATAL) std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  Severity severity_;
  std::ostringstream stream_;
};

// The text of a failed comparison, or null when it holds; each operand is evaluated once.
template <typename A, typename B, typename Compare>
std::unique_ptr<std::string> check_op(const A& a, const B& b, Compare holds, const char* text) {
  if (holds(a, b)) return nullptr;
  std::ostringstream out;
  out << "Check failed: " << text << " (" << a << " vs. " << b << ") ";
  return std::make_unique<std::string>(out.str());
}

template <typename T>
T* check_notnull(T* pointer, const char* file, int line, const char* text) {
  if (pointer == nullptr)
    LogLine(file, line, Severity::FATAL).stream() << "Check failed: " << text << " is null";
  return pointer;
}

}  // namespace detail
}  // namespace ps

#define PS_CHECK_OP_(a, b, op)                                                                  \
  while (auto ps_check_failed_ = ::ps::detail::check_op(                                        \
             (a), (b), [](const auto& x, const auto& y) { return x op y; }, #a " " #op " " #b)) \
  ::ps::detail::LogLine(__FILE__, __LINE__, ::ps::detail::Severity::FATAL).stream() << *ps_check_failed_

#ifndef CHECK
#define CHECK(x) \
  while (!(x))   \
  ::ps::detail::LogLine(__FILE__, __LINE__, ::ps::detail::Severity::FATAL).stream() << "Check failed: " #x " "
#define CHECK_EQ(a, b) PS_CHECK_OP_(a, b, ==)
#define CHECK_NE(a, b) PS_CHECK_OP_(a, b, !=)
#define CHECK_LT(a, b) PS_CHECK_OP_(a, b, <)
#define CHECK_LE(a, b) PS_CHECK_OP_(a, b, <=)
#define CHECK_GT(a, b) PS_CHECK_OP_(a, b, >)
#define CHECK_GE(a, b) PS_CHECK_OP_(a, b, >=)
#define CHECK_NOTNULL(x) ::ps::detail::check_notnull((x), __FILE__, __LINE__, #x)
#endif
#ifndef LOG
#define LOG(severity) ::ps::detail::LogLine(__FILE__, __LINE__, ::ps::detail::Severity::severity).stream()
#endif
#ifndef LL
#define LL LOG(ERROR)
#endif

#endif  // PS_INTERNAL_UTILS_H_
