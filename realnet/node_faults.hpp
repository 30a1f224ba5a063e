// The scenario's [faults] as a real node applies them to itself (docs/FAULTS.md "The same faults for
// real"): to what it receives (loss, duplication, partitions, clogs), to its executor tasks (slow)
// and to itself (crashes). The receiver decides, since a real sender cannot know what the network did
// to its message; windows are read on the job's clock (`pstwin run` gives every node the job's start,
// PSTWIN_JOB_START), so one scenario file injects the same schedule in the simulator and for real.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/message.hpp"
#include "core/random.hpp"
#include "core/types.hpp"
#include "ps/faults.hpp"
#include "ps/observer.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::realnet {

class NodeFaults {
 public:
  // `kernel_partitions`: partitions that list hosts are the kernel's (`pstwin run --netns
  // --kernel-partitions`), so this node leaves them alone.
  NodeFaults(const Scenario& scenario, bool kernel_partitions);

  // What happens to one received message.
  enum class Fate { kDeliver, kLose, kDuplicate, kPartitioned, kHold };
  struct Verdict {
    Fate fate = Fate::kDeliver;
    Seconds release = 0;  // kHold: when a clog lets it through
  };
  // `job_time`: seconds since the job started. `random(purpose)` gives the receiver's stream.
  // Messages of registrants (no id yet), and ids outside the job, are never hit: nothing could
  // resend a registration, and a forged id is the protocol's to refuse.
  Verdict on_receipt(const MessageHeader& header, Seconds job_time,
                     const std::function<RandomStream&(std::string_view)>& random) const;
  // How many times longer a task of node `self` starting at `job_time` takes (1: not slowed).
  double slow_factor(Seconds job_time, NodeId self) const;
  // faults.crashes entries of the form {node, at}: (node name, job time).
  std::vector<std::pair<std::string, Seconds>> timed_crashes() const;
  // The node's name as in results.json ("worker 1"), or "" for an id outside the job.
  std::string_view name_of(NodeId id) const;
  static std::string describe(NodeId id, std::string_view name);  // "worker 1" or "node 42"

 private:
  std::optional<FaultEndpoint> endpoint(NodeId id) const;

  const Scenario& scenario_;
  FaultsConfig faults_;  // the scenario's, less what the kernel does
  FaultPlan plan_;
  // Every node of the job: id -> (name, host).
  std::map<NodeId, std::pair<std::string, std::string>> nodes_;
};

// faults.crashes entries of the form {node = "worker W", iteration = I}: crashes the worker as it
// would start iteration I (when it finishes I - 1), as the simulator's CrashSchedule does; and the
// workers the scheduler declared lost (ps.on_worker_loss = "continue"), for results.json.
class CrashObserver final : public RunObserver {
 public:
  // `crash(worker)` stops that worker; called on the thread that reported the iteration.
  CrashObserver(const Scenario& scenario, std::function<void(int worker)> crash);
  // Whether it has anything to do in this scenario.
  bool needed() const { return !at_.empty() || continues_on_loss_; }
  void iteration_done(int worker, std::uint32_t iteration, Seconds start, Seconds end) override;
  void worker_lost(int worker, Seconds at) override;
  std::vector<std::string> lost() const;  // "worker 1 at 10.2 s", in the order declared

 private:
  std::set<std::pair<int, std::uint32_t>> at_;  // (worker, last iteration it finishes)
  std::function<void(int)> crash_;
  bool continues_on_loss_ = false;
  mutable std::mutex mutex_;  // worker_lost comes from every node's loop
  std::vector<std::string> lost_;
  std::set<int> reported_;
};

}  // namespace pstwin::realnet
