#include "realnet/shm_staging.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace pstwin::realnet {
namespace {

std::runtime_error shm_error(const std::string& what, const std::string& name) {
  return std::runtime_error("shared-memory staging: " + what + " " + name + ": " + std::strerror(errno) +
                            " (check that /dev/shm is mounted and has room)");
}

// Closes a descriptor on every path out of open(); the mapping outlives it.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string job_staging_prefix(int root_port) {
  return "pstwin_" + std::to_string(root_port) + "_";
}

std::string host_staging_prefix(int root_port, std::string_view host) {
  std::string out = job_staging_prefix(root_port);
  for (const char c : host) {
    const bool kept =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    out += kept ? c : '-';
  }
  return out + "_";
}

ShmStaging::ShmStaging(std::string prefix) : prefix_(std::move(prefix)) {}

ShmStaging::~ShmStaging() {
  // Unlinking only removes the names: mappings still held (payloads in flight) stay valid.
  for (const auto& name : created_) ::shm_unlink(name.c_str());
}

std::string ShmStaging::object_name(std::string_view name) const {
  std::string out = "/" + prefix_;
  for (const char c : name) out += c == '/' ? '_' : c;  // shm names allow no further '/'
  return out;
}

std::size_t ShmStaging::unlink_all(std::string_view prefix) {
  std::size_t count = 0;
  std::error_code error;
  // Linux keeps POSIX shared-memory objects as files in /dev/shm, named without the leading '/'.
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(prefix) && ::shm_unlink(("/" + name).c_str()) == 0) ++count;
  }
  return count;
}

std::size_t ShmStaging::created() const {
  std::lock_guard lock(mutex_);
  return created_.size();
}

std::shared_ptr<ByteBuffer> ShmStaging::open(std::string_view name, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (auto it = regions_.find(name); it != regions_.end() && it->second->size() == bytes) return it->second;
  const std::string object = object_name(name);
  // O_EXCL first, to know whether this process created the object (and must unlink it).
  Fd fd{::shm_open(object.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
  if (fd.fd >= 0)
    created_.insert(object);
  else if (errno == EEXIST)
    fd.fd = ::shm_open(object.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd.fd < 0) throw shm_error("cannot open", object);
  // Another process may have sized it already; growing or shrinking to `bytes` matches
  // SharedStaging's "a new buffer if the size differs" closely enough for one job.
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throw shm_error("cannot stat", object);
  const std::size_t length = bytes == 0 ? 1 : bytes;  // mmap refuses length 0
  if (static_cast<std::size_t>(st.st_size) != length && ::ftruncate(fd.fd, static_cast<off_t>(length)) != 0)
    throw shm_error("cannot size", object);
  void* mapped = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (mapped == MAP_FAILED) throw shm_error("cannot map", object);
  auto buffer = std::make_shared<ByteBuffer>(static_cast<std::byte*>(mapped), bytes,
                                             [mapped, length] { ::munmap(mapped, length); });
  regions_.insert_or_assign(std::string(name), buffer);
  return buffer;
}

}  // namespace pstwin::realnet
