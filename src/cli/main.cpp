// pstwin: run parameter-server scenarios in the SimGrid twin (and, later, for real).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <iostream>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "cli/data_files.hpp"
#include "scenario/scenario.hpp"

namespace {

// An error names what the user gave (a path, a --set text): control characters in it would drive
// the terminal, so they are printed as \xNN.
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[u >> 4], kHex[u & 0xf]};
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pstwin::cli;
  static constexpr const char* kEncryptHelp =
      "curve: every node encrypts its traffic with ZeroMQ CURVE, keys derived from the job's token "
      "(PSTWIN_ENCRYPT=curve; --van zmq only; docs/SECURITY.md); none (default): plain TCP";
  // One promise for every subcommand, so scripts can rely on it.
  static constexpr const char* kQuietHelp =
      "print nothing on success but what the command is for (check: the scenario); a failure or an "
      "invariant violation still goes to stderr, exit status unchanged";
  CLI::App app{"pstwin: a parameter-server system and its deterministic SimGrid twin"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pstwin " PSTWIN_VERSION, "print the version and exit");
  CommonOptions common;
  SimOptions sim_options;
  ExploreOptions explore_options;
  NodeOptions node_options;
  RunOptions run_options;

  // CLI11 would take "-1" for an unsigned seed as 2^64 - 1: only plain decimal digits that fit.
  const CLI::Validator seed_check(
      [](std::string& text) -> std::string {
        std::uint64_t value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
          return "\"" + printable(text) + "\" is not a seed: expected an integer 0.." +
                 std::to_string(std::numeric_limits<std::uint64_t>::max());
        return {};
      },
      "SEED");

  auto add_common = [&](CLI::App* sub) {
    sub->add_option("FILE", common.scenario_path, "scenario file (TOML), e.g. scenarios/quickstart.toml")
        ->required()
        ->check(CLI::ExistingFile);
    sub->add_option("--set", common.sets,
                    "override a scenario field by its dotted path, e.g. --set staging.naming=legacy-key-only "
                    "(repeatable)")
        ->type_name("FIELD=VALUE")
        ->take_all();
    sub->add_flag("-q,--quiet", common.quiet, kQuietHelp);
  };

  auto* sim =
      app.add_subcommand("sim", "simulate a scenario in SimGrid and write results.json and trace.json");
  add_common(sim);
  sim->add_option("--seed", sim_options.seed, "seed for every random choice (default: the scenario's seed)")
      ->check(seed_check);
  sim->add_option("--out", sim_options.out_dir, "output directory (default: pstwin-out/<scenario name>)");

  auto* check = app.add_subcommand("check", "validate a scenario and print it fully resolved");
  add_common(check);

  auto* explore =
      app.add_subcommand("explore", "simulate many seeds and report invariant violations with replays");
  add_common(explore);
  // Each seed's scenario and report are held until the end: a million is about a GB.
  explore->add_option("--seeds", explore_options.seeds, "how many seeds to run (1..1000000)")
      ->required()
      ->check(seed_check & CLI::Range(std::uint64_t{1}, std::uint64_t{1000000}));
  explore->add_option("--first-seed", explore_options.first_seed, "first seed (default 0)")
      ->check(seed_check);
  explore->add_option("-j,--jobs", explore_options.jobs, "simulations run in parallel (default 2)")
      ->check(CLI::Range(1, 256));
  explore->add_option("--out", explore_options.out_dir,
                      "write explore.json here: a JSON array with one object per seed (seed, ok, "
                      "violation_count, first_violation, replay, class: safety, performance or clean); with "
                      "--swarm an object with the counts "
                      "and rates of each class and the runs");
  explore->add_flag("--swarm", explore_options.swarm,
                    "draw fault knobs (loss, duplicate, partition, clog, slow node) from each seed and "
                    "split safety violations from missed performance bounds (docs/FAULTS.md)");

  explore
      ->add_option("--shard", explore_options.shard,
                   "run only shard I of N: seed FIRST+k when k mod N = I, written to "
                   "explore-shard-I-of-N.json; `launcher` takes I/N from mpirun's or srun's rank and size; "
                   "`pstwin merge` of the shards' files gives the unsharded explore.json (docs/SWEEP.md)")
      ->type_name("I/N");

  SweepOptions sweep_options;
  auto* sweep = app.add_subcommand(
      "sweep",
      "simulate the product of grid values and seeds; write sweep.csv (one row per run), sweep.json and "
      "plots of each measure against the first grid field (docs/SWEEP.md)");
  add_common(sweep);
  sweep
      ->add_option("--grid", sweep_options.grid,
                   "a scenario field and its values, e.g. --grid roles.workers=8,16,32 (repeatable: the "
                   "product of every --grid is run; the first is the plots' x axis, the second their lines)")
      ->type_name("FIELD=V1,V2,...")
      ->required();
  sweep->add_option("--seeds", sweep_options.seeds, "runs per grid point, seeds S, S+1, ... (default 1)")
      ->check(CLI::PositiveNumber);
  sweep->add_option("--first-seed", sweep_options.first_seed, "first seed S (default: the scenario's seed)");
  sweep->add_option("-j,--jobs", sweep_options.jobs, "simulations run in parallel (default 2)")
      ->check(CLI::Range(1, 256));
  sweep->add_option("--out", sweep_options.out_dir,
                    "output directory (default: pstwin-out/<scenario name>-sweep)");
  sweep->add_flag("!--no-plots", sweep_options.plots, "write sweep.csv and sweep.json only");
  sweep
      ->add_option(
          "--shard", sweep_options.shard,
          "run only shard I of N: run k of the grid x seeds product when k mod N = I, written to "
          "sweep-shard-I-of-N.csv and .json, no plots; `launcher` takes I/N from mpirun's or srun's "
          "rank and size; `pstwin merge` of the shards' files gives the unsharded sweep (docs/SWEEP.md)")
      ->type_name("I/N");

  PlotOptions plot_options;
  auto* plot = app.add_subcommand(
      "plot",
      "draw PNG and SVG plots of one run's results.json (pstwin sim or run --out): iteration times, link "
      "utilisation (bytes where no bandwidth was emulated), test accuracy where trained (docs/SWEEP.md)");
  plot->add_option("RUN_DIR", plot_options.run_dir, "a run's output directory, with results.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  plot->add_option("--out", plot_options.out_dir, "where the plots go (default: RUN_DIR)");
  plot->add_flag("-q,--quiet", plot_options.quiet, kQuietHelp);

  auto* node = app.add_subcommand(
      "node",
      "run ONE node (scheduler, server or worker) of a real job configured by BytePS/ps-lite environment "
      "variables (DMLC_ROLE, DMLC_PS_ROOT_URI, ...; see docs/ENVIRONMENT.md); it stops after "
      "run.time_limit (wall clock)");
  // Found next to the binary so `pstwin node` works from any directory, as the BytePS launcher does.
  common.scenario_path = data_file("scenarios/quickstart.toml");
  // FILE as every other command takes it; --scenario stays for the scripts and docs that use it.
  auto* node_file =
      node->add_option(
              "FILE", common.scenario_path,
              "scenario file (TOML); environment variables override it (default: "
              "<prefix>/share/pstwin/scenarios/quickstart.toml, or the source tree's when run from the build "
              "directory)")
          ->check(CLI::ExistingFile);
  auto* node_scenario = node->add_option("--scenario", common.scenario_path, "the same as FILE")
                            ->check(CLI::ExistingFile)
                            ->excludes(node_file);
  node->add_option("--set", common.sets, "override a scenario field, after the environment (repeatable)")
      ->type_name("FIELD=VALUE")
      ->take_all();
  node->add_flag("-q,--quiet", common.quiet,
                 "no log lines and, on success, no summary line; a failure or a violation still goes to "
                 "stderr, exit status unchanged");
  node->add_flag("--launched", node_options.launched,
                 "started by `pstwin launch`: read the job's environment and scenario from stdin, write the "
                 "report to stdout (framed), and stop when stdin ends")
      ->excludes(node_file)
      ->excludes(node_scenario);
  node->add_option(
      "--report", node_options.report_path,
      "at exit, write this node's partial report (JSON) to this file, or with DIR/ (a directory) to "
      "DIR/<role><rank>.json (scheduler.json, server0.json, worker1.json); `pstwin merge DIR` merges them");

  auto* run = app.add_subcommand(
      "run",
      "run a scenario for real: one `pstwin node` process per node on 127.0.0.1 (nodes share staging "
      "memory only with nodes on their scenario host), stopped after run.time_limit (wall clock), then "
      "write the same results.json as sim");
  add_common(run);
  run->add_option("--seed", run_options.seed,
                  "seed for every random choice, passed to every node (default: the scenario's seed)")
      ->check(seed_check);
  run->add_option("--out", run_options.out_dir, "output directory (default: pstwin-out/<scenario name>)");
  run->add_flag("--netns", run_options.netns,
                "each scenario host in its own network namespace, veth links shaped with tc tbf to its "
                "bandwidth (root; latency is not emulated); everything made is removed on exit");
  run->add_flag("--kernel-partitions", run_options.kernel_partitions,
                "with --netns: faults.partitions that list hosts are cut by the kernel (nftables on the "
                "switch drops every frame across the partition; TCP holds and retransmits), not by the nodes")
      ->needs("--netns");
  run->add_option("--van", run_options.van,
                  "every node's transport: epoll (FPT's epoll TCP transport with the send pool; the "
                  "default), zmq (ZeroMQ; the default with --encrypt curve, which only it has) or ucx (UCX: "
                  "shared memory, TCP or RDMA as UCX_TLS allows); sets "
                  "DMLC_PS_VAN_TYPE for the nodes")
      ->check(CLI::IsMember({"zmq", "epoll", "ucx"}));
  run->add_option("--encrypt", run_options.encrypt, kEncryptHelp)->check(CLI::IsMember({"none", "curve"}));
  run->footer(
      "pstwin run FILE [OPTIONS] -- COMMAND [ARGS...]: every node runs COMMAND instead of `pstwin node` (a "
      "ps-lite or pstwin.torch application, e.g. -- python3 train.py) with the scenario's roles and the "
      "same DMLC_* environment; prints each node's output and exits 0 when every process did");

  LaunchOptions launch_options;
  auto* launch = app.add_subcommand(
      "launch",
      "run a scenario for real on the hosts of a hostfile: one `pstwin node` per node started through a "
      "remote shell (ssh), the scheduler on the first host, then write the same results.json as run "
      "(docs/ENVIRONMENT.md, \"pstwin launch\")");
  add_common(launch);
  launch
      ->add_option("--hostfile", launch_options.hostfile,
                   "the hosts, one a line: HOST [slots=N] [address=IP] (# comments, blank lines allowed)")
      ->required()
      ->check(CLI::ExistingFile);
  launch->add_option(
      "--rsh", launch_options.rsh,
      "the command that runs a command on a host, {host} standing for the hostfile's HOST "
      "(appended when absent), e.g. 'ip netns exec {host}' (default: ssh -o BatchMode=yes {host})");
  launch->add_option("--remote-pstwin", launch_options.remote_pstwin,
                     "the pstwin binary's path on every host (default: this binary's path)");
  launch
      ->add_option("--port", launch_options.port,
                   "the scheduler's port on the first host (default: one free on this machine)")
      ->check(CLI::Range(1, 65535));
  launch->add_option("--seed", launch_options.seed, "seed for every random choice, passed to every node")
      ->check(seed_check);
  launch->add_option("--out", launch_options.out_dir,
                     "output directory (default: pstwin-out/<scenario name>)");
  launch
      ->add_option("--van", launch_options.van,
                   "every node's transport: epoll (default), zmq (the default with --encrypt curve) or ucx")
      ->check(CLI::IsMember({"zmq", "epoll", "ucx"}));
  launch->add_option("--encrypt", launch_options.encrypt, kEncryptHelp)
      ->check(CLI::IsMember({"none", "curve"}));

  MergeOptions merge_options;
  auto* merge = app.add_subcommand(
      "merge",
      "write results.json and trace.json of a real job started any other way (by hand with DMLC_* "
      "variables, mpirun, srun) from the reports its nodes wrote with `pstwin node --report DIR/`; or, "
      "given the files of `explore --shard` or `sweep --shard`, the unsharded explore.json or sweep.csv");
  merge
      ->add_option("DIR", merge_options.parts_dir,
                   "directory with the nodes' reports (*.json), or the shards' files")
      ->required()
      ->check(CLI::ExistingDirectory);
  merge
      ->add_option("--scenario", merge_options.scenario_path,
                   "the scenario the job ran (default: the one the reports name, as the nodes resolved it)")
      ->check(CLI::ExistingFile);
  merge->add_option("--set", merge_options.sets, "with --scenario: override a scenario field (repeatable)")
      ->type_name("FIELD=VALUE")
      ->take_all()
      ->needs("--scenario");
  merge->add_option("--out", merge_options.out_dir, "output directory (default: DIR)");
  merge->add_flag("-q,--quiet", merge_options.quiet, kQuietHelp);

  CalibrateOptions calibrate_options;
  auto* calibrate = app.add_subcommand(
      "calibrate",
      "measure the van's CPU cost per message and per byte with real loopback jobs (1 server, 2 workers, "
      "blocking and pipelined, several sizes), fit the simulator's [cpu] fields to them by least squares "
      "and print how well they fit; writes the fields as a scenario fragment (docs/FIDELITY.md)");
  calibrate->add_option("--van", calibrate_options.van, "the van measured: epoll (default), zmq or ucx")
      ->check(CLI::IsMember({"zmq", "epoll", "ucx"}));
  calibrate->add_option("--out", calibrate_options.out, "write the fragment to this file (default: stdout)");
  calibrate->add_option("--sizes", calibrate_options.sizes,
                        "partition sizes, one blocking and one pipelined job each (default "
                        "4KB,64KB,256KB,1MB,4MB,16MB)");
  calibrate
      ->add_option("--nodes", calibrate_options.nodes,
                   "how the real jobs run their nodes: processes (default, as `pstwin run` on one "
                   "machine) or in-process (threads of one process, as the loopback bench)")
      ->check(CLI::IsMember({"processes", "in-process"}));
  calibrate
      ->add_option("--rounds", calibrate_options.rounds,
                   "real runs of every job, one job after another in each round; the median is fitted "
                   "(default 3)")
      ->check(CLI::Range(1, 99));
  calibrate->add_flag("--quick", calibrate_options.quick, "fewer iterations per job: a rougher fit, sooner");
  calibrate->add_flag("-q,--quiet", calibrate_options.quiet, kQuietHelp);

  CompareOptions compare_options;
  auto* compare = app.add_subcommand(
      "compare", "compare a simulated and a real run of one scenario: iteration times, link bytes, errors");
  compare->add_option("SIM_DIR", compare_options.sim_dir, "directory with the sim's results.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  compare->add_option("REAL_DIR", compare_options.real_dir, "directory with the real run's results.json")
      ->required()
      ->check(CLI::ExistingDirectory);
  compare
      ->add_option("--tolerance", compare_options.tolerance,
                   "exit 1 if the mean iteration times differ by more than this fraction, e.g. 0.1")
      ->check(CLI::NonNegativeNumber);

  try {
    // `pstwin run ... -- COMMAND`: the command is cut off before CLI11 sees it, so its own arguments
    // (`sh -c`, `python3 -u`) are never taken for pstwin's options.
    std::vector<std::string> args(argv, argv + argc);
    if (const auto dashes = std::ranges::find(args, "--");
        args.size() > 1 && args[1] == "run" && dashes != args.end()) {
      run_options.command.assign(dashes + 1, args.end());
      args.erase(dashes, args.end());
      if (run_options.command.empty()) {
        std::cerr << "pstwin run: nothing after --; give the command every node runs, e.g. -- python3 "
                     "train.py\n";
        return 2;
      }
    }
    std::vector<char*> parsed;
    for (auto& arg : args) parsed.push_back(arg.data());
    app.parse(static_cast<int>(parsed.size()), parsed.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (*sim) return run_sim(common, sim_options);
    if (*check) return run_check(common);
    if (*explore) return run_explore(common, explore_options);
    if (*sweep) return run_sweep(common, sweep_options);
    if (*plot) return run_plot(plot_options);
    if (*node) return run_node(common, node_options);
    if (*run) return run_job(common, run_options);
    if (*launch) return run_launch(common, launch_options);
    if (*merge) return run_merge(merge_options);
    if (*compare) return run_compare(compare_options);
    if (*calibrate) return run_calibrate(calibrate_options);
  } catch (const pstwin::ScenarioError& e) {
    std::cerr << "pstwin: " << printable(e.what()) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "pstwin: error: " << printable(e.what()) << "\n";
    return 1;
  }
  return 2;
}
