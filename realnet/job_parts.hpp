// The partial reports the nodes of a real job write (`pstwin node --report`) and their merge into one
// RunReport: by `pstwin run` and `pstwin launch` for the nodes they started, by `pstwin merge` for a
// job started any other way (by hand, mpirun, Slurm).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "realnet/node_run.hpp"
#include "report/run_report.hpp"
#include "scenario/scenario.hpp"

namespace pstwin::realnet {

// The JSON `pstwin node --report PATH` writes, and back.
nlohmann::ordered_json part_to_json(const NodePart& part);
NodePart part_from_json(const nlohmann::json& json);

// "worker 1 (node 11)", "server (never joined)".
std::string node_name(const NodePart& part);

// The file a node writes its report to under `pstwin node --report DIR/`: "scheduler.json",
// "server0.json", "worker1.json", "validator0.json"; "worker-pid4242.json" for a node that never
// joined (it has no rank).
std::string part_file_name(const NodePart& part, int pid);

// Merges the parts into a report as RunRecorder::fill and run_local do: iterations are per index the
// slowest worker's duration, invariant counts are sums, violations name their node, and the model
// digest combines the per-key digests exactly as RunRecorder::fill does. `failure` non-empty: the job
// as a whole failed (a child failed, a timeout or a signal).
RunReport merge_parts(const Scenario& scenario, const std::vector<NodePart>& parts,
                      const std::string& failure);

// A set of node reports that cannot be merged; what() names the file, what is wrong and the fix. A
// ScenarioError, so the CLI reports it as bad input (exit status 2).
class JobPartsError : public ScenarioError {
 public:
  using ScenarioError::ScenarioError;
};

struct JobPart {
  std::filesystem::path file;
  NodePart part;
};

// Every node report in `dir`: each *.json file but results.json and trace.json (what `pstwin merge`
// writes). Ordered as merge_parts takes them: the scheduler, then servers, workers and validators by
// rank. Throws JobPartsError for a directory without reports, a file that is not a report (or over
// 1 GiB), two reports of one node, and a report of another job: another scheduler address or
// scenario than the others', or an address that is not the one the scheduler's node table lists
// for its node id.
std::vector<JobPart> read_job_parts(const std::filesystem::path& dir);

// The nodes the scenario's roles call for that no part reports, as "worker 1", in role and rank order.
std::vector<std::string> missing_nodes(const Scenario& scenario, const std::vector<NodePart>& parts);

}  // namespace pstwin::realnet
