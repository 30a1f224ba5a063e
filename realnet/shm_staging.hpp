// Cross-process staging: each staging buffer is a POSIX shared-memory object (/dev/shm), so two
// processes on one host that open the same name map the same bytes, exactly as BytePS's
// "BytePS_ShM_<key>" buffers did (and, with staging.naming = legacy-key-only, as in its crossed-line
// bug). The objects this process created are unlinked when the ShmStaging goes.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include "core/runtime.hpp"

namespace pstwin::realnet {

// Every staging object of the job whose scheduler listens on `root_port`, on any host:
// "pstwin_<root port>_". The scheduler's and the launcher's sweeps remove objects by this prefix.
std::string job_staging_prefix(int root_port);
// The staging objects of that job's nodes on one host: "pstwin_<root port>_<host>_", `host` with every
// character but letters, digits, '.' and '-' replaced by '-' (so the '_' after it ends it). Only
// processes on one host share staging memory, as on a real cluster and in the simulator, also when
// several emulated hosts (`pstwin run`, with or without --netns) share this machine's /dev/shm.
std::string host_staging_prefix(int root_port, std::string_view host);

class ShmStaging final : public StagingArea {
 public:
  // `prefix` separates independent jobs and the hosts of one job (pstwin node uses host_staging_prefix).
  explicit ShmStaging(std::string prefix);
  ~ShmStaging() override;
  ShmStaging(const ShmStaging&) = delete;
  ShmStaging& operator=(const ShmStaging&) = delete;

  std::shared_ptr<ByteBuffer> open(std::string_view name, std::size_t bytes) override;
  // The shared-memory object name ("/<prefix><name>", '/' in `name` replaced) used for `name`.
  std::string object_name(std::string_view name) const;
  std::size_t created() const;  // how many objects this process created (and will unlink)
  // Unlinks every object whose name starts with `prefix` (a job's, once all its nodes are gone: a
  // node that was killed could not unlink its own). Returns how many.
  static std::size_t unlink_all(std::string_view prefix);

 private:
  std::string prefix_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<ByteBuffer>, std::less<>> regions_;
  std::set<std::string> created_;
};

}  // namespace pstwin::realnet
