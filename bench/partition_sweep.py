#!/usr/bin/env python3
"""Partition-size sweep, simulated and real: does the twin rank partition sizes as the real job does?

    bench/partition_sweep.py [--pstwin BIN] [--van epoll|zmq] [--cpu FRAGMENT] [--sizes 16KB,...]
                             [--iterations N] [--rounds N] [--netns [--bandwidth RATE]] [--out DIR]
                             [--set FIELD=VALUE]...

One scenario (2 workers, 1 server, a 32 MB model as one tensor, sync, no compute, real payloads) is run
for every partition size with `pstwin sim`, its [cpu] fields taken from FRAGMENT (`pstwin calibrate
--van VAN --out FRAGMENT`; without --cpu the sweep calibrates first and keeps the fragment in DIR), and
for real with `pstwin run --van VAN` (--rounds times per size, interleaved; the median is compared):

- on loopback (the default): every node process on 127.0.0.1; the scenario's hosts have links faster
  than loopback, so the CPU is the limit;
- with --netns: `pstwin run --netns`, each host in its own network namespace, links shaped to RATE
  (default 1Gbps, as the fidelity scenarios) and 6 us of latency (the namespace cluster's own;
  docs/FIDELITY.md). Needs root.

Either way every node runs on this machine's CPUs, so the simulated runs set cpu.core_scope =
"machine": the nodes' net lanes share the fragment's cpu.shared_cores (this machine's CPU count where
the fragment has none). Prints a Markdown table: size, simulated and real iteration time (median after
the first iteration), the sim's error, and the rank of the size in each (1: fastest); then whether the
ranks agree and the largest error. Also prints the same table for the simulator with a core per lane
(no cpu.shared_cores) and without [cpu] fields, and the load average before and after. Exits 1 if a
run fails, 3 if the ranks differ or an error exceeds 15 %.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = ["16KB", "64KB", "256KB", "1MB", "4MB", "16MB"]


def scenario_text(partition, iterations, cpu_fragment, bandwidth, latency):
    text = f"""name = "partition_sweep"
[cluster]
host_bandwidth = "{bandwidth}"
host_latency = "{latency}"
[roles]
servers = 1
workers = 2
[ps]
mode = "sync"
partition_bytes = "{partition}"
[workload]
tensor_bytes = ["32MB"]
compute = "0s"
iterations = {iterations}
payload = "real"
[staging]
enabled = false
[invariants]
aggregates = false
updates = false
sync_identical = false
[output]
trace = false
"""
    return text + ("\n" + cpu_fragment if cpu_fragment else "")


def steady_median(results_path):
    with open(results_path) as f:
        report = json.load(f)
    if not report.get("completed"):
        raise RuntimeError(f"{results_path}: the run failed: {report.get('failure')}")
    times = [it["time_s"] for it in report["iterations"]][1:]
    return statistics.median(times)


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(" ".join(cmd) + "\n" + done.stdout + done.stderr)
        raise SystemExit(1)


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0] * len(values)
    for rank, i in enumerate(order, 1):
        out[i] = rank
    return out


def table(title, sizes, sim, real):
    sim_rank, real_rank = ranks(sim), ranks(real)
    print(f"\n{title}\n")
    print("| partition | sim iteration | real iteration | sim error | rank sim | rank real |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for i, size in enumerate(sizes):
        error = (sim[i] - real[i]) / real[i]
        worst = max(worst, abs(error))
        print(f"| {size} | {sim[i] * 1e3:.1f} ms | {real[i] * 1e3:.1f} ms | {error * 100:+.1f} % | "
              f"{sim_rank[i]} | {real_rank[i]} |")
    same = sim_rank == real_rank
    print(f"\nranks {'agree' if same else 'differ'}; largest error {worst * 100:.1f} %")
    return same, worst


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pstwin", default="build/pstwin")
    parser.add_argument("--van", default="epoll", choices=["zmq", "epoll"])
    parser.add_argument("--cpu", help="[cpu] fragment from `pstwin calibrate` (default: calibrate first)")
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3,
                        help="real runs per size, the sizes interleaved; the median is compared (default 3)")
    parser.add_argument("--out", default=None, help="keep every run's output here (default: a temp dir)")
    parser.add_argument("--set", action="append", default=[], help="FIELD=VALUE for every run")
    parser.add_argument("--netns", action="store_true",
                        help="run the real side as a namespace cluster (`pstwin run --netns`, root)")
    parser.add_argument("--bandwidth", default=None,
                        help="with --netns: every host's link (default 1Gbps)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give at least 1 real run per size")
    if args.bandwidth and not args.netns:
        parser.error("--bandwidth shapes the namespace cluster's links; add --netns (loopback is not shaped)")
    # Loopback is not shaped: links far faster than it leave the CPU as the limit. The namespace
    # cluster's links are tbf-shaped veths with the machine's own 6 us of latency.
    bandwidth, latency = ((args.bandwidth or "1Gbps", "6us") if args.netns else ("1000GBps", "1us"))
    out = args.out or tempfile.mkdtemp(prefix="partition_sweep.")
    os.makedirs(out, exist_ok=True)
    sizes = args.sizes.split(",")
    with open("/proc/loadavg") as f:
        load_before = " ".join(f.read().split()[:3])
    where = f"namespace cluster, links {bandwidth}" if args.netns else "loopback"
    print(f"partition sweep: van {args.van}, {where}, {os.cpu_count()} CPUs, load average {load_before} "
          f"before, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    fragment_path = args.cpu
    if not fragment_path:
        fragment_path = os.path.join(out, f"cpu-{args.van}.toml")
        run([args.pstwin, "calibrate", "-q", "--van", args.van, "--out", fragment_path])
    with open(fragment_path) as f:
        fragment = f.read()
    print("".join("    " + line for line in fragment.splitlines(True)))
    sets = [x for s in args.set for x in ("--set", s)]
    # Every node of a loopback or namespace cluster runs on this machine's CPUs.
    shared = [] if "shared_cores" in fragment else ["--set", f"cpu.shared_cores={os.cpu_count()}"]
    machine = shared + ["--set", "cpu.core_scope=machine"]
    own_core = ["--set", "cpu.shared_cores=0"]
    sim, sim_own, sim_bare = [], [], []
    kinds = (("sim", fragment, machine, sim), ("sim-own-core", fragment, own_core, sim_own),
             ("sim-bare", "", [], sim_bare))
    for size in sizes:
        for kind, cpu, extra, into in kinds:
            path = os.path.join(out, f"{kind}-{size}.toml")
            with open(path, "w") as f:
                f.write(scenario_text(size, args.iterations, cpu, bandwidth, latency))
            run_dir = os.path.join(out, f"{kind}-{size}")
            run([args.pstwin, "sim", path, "-q", "--out", run_dir] + extra + sets)
            into.append(steady_median(os.path.join(run_dir, "results.json")))
    # The real side is noisy (a run's median moves by 20-30 % on a shared VM): every size runs
    # `rounds` times, one round of all sizes after the other, and the median of its runs is compared.
    rounds = {size: [] for size in sizes}
    netns = ["--netns"] if args.netns else []
    for round_index in range(args.rounds):
        for size in sizes:
            path = os.path.join(out, f"real-{size}.toml")
            with open(path, "w") as f:
                f.write(scenario_text(size, args.iterations, "", bandwidth, latency))
            run_dir = os.path.join(out, f"real-{size}-{round_index}")
            run([args.pstwin, "run", path, "-q", "--van", args.van, "--out", run_dir] + netns + sets)
            rounds[size].append(steady_median(os.path.join(run_dir, "results.json")))
    real = [statistics.median(rounds[size]) for size in sizes]
    with open("/proc/loadavg") as f:
        load_after = " ".join(f.read().split()[:3])
    same, worst = table("With the calibrated [cpu] fields, the nodes sharing this machine's cores:", sizes,
                        sim, real)
    table("With the calibrated [cpu] fields, a core per node's net lane:", sizes, sim_own, real)
    table("Without [cpu] fields (no CPU cost per message):", sizes, sim_bare, real)
    print(f"\nReal runs per size ({args.rounds}, interleaved), each the median iteration after the first:")
    for size in sizes:
        print(f"- {size}: " + ", ".join(f"{t * 1e3:.1f}" for t in rounds[size]) + " ms")
    print(f"\nload average after: {load_after}; runs in {out}")
    return 0 if same and worst <= 0.15 else 3


if __name__ == "__main__":
    sys.exit(main())
