// The pstwin subcommands. Each returns the process exit status: 0 success, 1 a run failed or an
// invariant was violated, 2 bad input (scenario or arguments).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pstwin::cli {

struct CommonOptions {
  std::string scenario_path;
  std::vector<std::string> sets;  // FIELD=VALUE
  // Nothing on success but what the command is for; failures and violations still go to stderr.
  bool quiet = false;
};

struct SimOptions {
  std::optional<std::uint64_t> seed;
  std::string out_dir;  // "" = pstwin-out/<scenario name>
};

struct ExploreOptions {
  std::uint64_t seeds = 20;
  std::uint64_t first_seed = 0;
  int jobs = 2;
  std::string out_dir;  // "" = no explore.json
  bool swarm = false;   // draw fault knobs per seed (docs/FAULTS.md, "Swarm")
  std::string shard;    // "I/N" or "launcher": run seed first_seed + k only when k mod N = I
};

struct SweepOptions {
  std::vector<std::string> grid;            // FIELD=V1,V2,... (one per --grid)
  std::uint64_t seeds = 1;                  // runs per grid point
  std::optional<std::uint64_t> first_seed;  // default: the scenario's seed
  int jobs = 2;
  std::string out_dir;  // "" = pstwin-out/<scenario name>-sweep
  bool plots = true;    // --no-plots: sweep.csv and sweep.json only
  std::string shard;    // "I/N" or "launcher": run k of the grid x seeds product only when k mod N = I
};

struct PlotOptions {
  std::string run_dir;  // holds results.json (and resolved.toml) of `pstwin sim` or `pstwin run`
  std::string out_dir;  // "" = run_dir
  bool quiet = false;
};

struct NodeOptions {
  std::string report_path;  // "" = no partial report
  bool launched = false;    // environment and scenario from stdin, report to stdout (`pstwin launch`)
};

struct LaunchOptions {
  std::string hostfile;               // HOST [slots=N] [address=IP] lines (realnet/launch_inputs.hpp)
  std::optional<std::uint64_t> seed;  // every node's scenario seed
  std::string out_dir;                // "" = pstwin-out/<scenario name>
  std::string rsh = "ssh -o BatchMode=yes {host}";
  std::string remote_pstwin;     // "" = this binary's path
  int port = 0;                  // the scheduler's port; 0 = one free on this machine
  std::string van;               // zmq | epoll | ucx; "" = epoll, zmq with --encrypt curve
  std::string encrypt = "none";  // none | curve (PSTWIN_ENCRYPT for every node)
};

struct RunOptions {
  std::optional<std::uint64_t> seed;  // --seed: the scenario's seed for every node, as sim's --seed
  std::string out_dir;                // "" = pstwin-out/<scenario name>
  bool netns = false;  // one network namespace per scenario host, links shaped with tc (root only)
  bool kernel_partitions = false;  // with netns: faults.partitions of hosts cut by the switch (nftables)
  std::string van;                 // zmq | epoll | ucx; "" = epoll, zmq with --encrypt curve
  std::string encrypt = "none";    // none | curve (PSTWIN_ENCRYPT for every node)
  // After `--`: every node runs this application instead of `pstwin node` (realnet::JobRunOptions).
  std::vector<std::string> command;
};

struct MergeOptions {
  std::string parts_dir;          // the nodes' --report files
  std::string scenario_path;      // "" = the scenario the reports name
  std::vector<std::string> sets;  // FIELD=VALUE on top of scenario_path
  std::string out_dir;            // "" = parts_dir
  bool quiet = false;
};

struct CalibrateOptions {
  std::string van = "epoll";                          // zmq | epoll | ucx (realnet/van.hpp)
  std::string sizes = "4KB,64KB,256KB,1MB,4MB,16MB";  // one blocking and one pipelined job each
  std::string out;                                    // "" = the fragment goes to stdout
  std::string nodes = "processes";                    // processes (as `pstwin run`) | in-process
  int rounds = 3;                                     // real runs of each job; the median is fitted
  bool quick = false;                                 // fewer iterations per job (tests)
  bool quiet = false;
};

struct CompareOptions {
  std::string sim_dir;   // holds the sim's results.json
  std::string real_dir;  // holds the real run's results.json
  double tolerance = 0;  // > 0: exit 1 when the mean iteration time differs by more (relative)
};

int run_sim(const CommonOptions& common, const SimOptions& options);
int run_check(const CommonOptions& common);
int run_explore(const CommonOptions& common, const ExploreOptions& options);
// The product of grid values and seeds in the simulator: sweep.csv, sweep.json and plots (docs/SWEEP.md).
int run_sweep(const CommonOptions& common, const SweepOptions& options);
// The plots of a sweep's sweep.csv with tools/pstwin_plot.py; a machine without python3 or matplotlib
// still has the CSV, and is told what to install. False only when the script itself failed.
bool draw_sweep_plots(const std::string& out_dir, bool quiet);
// PNG and SVG plots of one run: iteration times, link utilisation, accuracy (docs/SWEEP.md).
int run_plot(const PlotOptions& options);
// One node of a real job, configured by the BytePS/ps-lite environment (docs/ENVIRONMENT.md) on top
// of common.scenario_path; environment values go below --set.
int run_node(const CommonOptions& common, const NodeOptions& options);
// A whole real job as local `pstwin node` processes on 127.0.0.1; writes the same outputs as sim.
int run_job(const CommonOptions& common, const RunOptions& options);

// results.json and trace.json of a real job started any other way (by hand, mpirun, Slurm) from its
// nodes' --report files (realnet/job_parts.hpp).
int run_merge(const MergeOptions& options);

// A whole real job on a hostfile's hosts through a remote shell (realnet/job_launch.hpp).
int run_launch(const CommonOptions& common, const LaunchOptions& options);

// The van's CPU cost per message and per byte on loopback, fitted for the simulator's [cpu] fields;
// writes them as a scenario fragment (src/cli/calibrate.cpp).
int run_calibrate(const CalibrateOptions& options);

// Side by side: per-iteration time, per-link bytes and utilisation, relative errors (src/report/compare.hpp).
int run_compare(const CompareOptions& options);

// "a.b=c" -> {"a.b", "c"}; throws ScenarioError naming the argument when there is no '='.
std::pair<std::string, std::string> split_override(const std::string& text);

}  // namespace pstwin::cli
