#!/usr/bin/env python3
"""A seeded family of load-balancing scenarios, each run in the simulator: iteration time over the bound.

    bench/lb_family.py [--seed N] [--count K] [--pstwin BIN] [--out DIR] [-j JOBS] [--set FIELD=VALUE]...
                       [--floor BYTES,BYTES,...]

Each scenario (2-64 workers, 1-8 servers, 1-40 Gb/s NICs, homogeneous or mixed: servers, workers or
both with NICs of 1, 1/2 or 1/4 the cluster's, 5-50 us links, 1-500 MB models in 1-40 tensors, workers x model at most 1 GB) leaves every `ps` and `sim` field but `balancing = "lb"` at its default, so pstwin picks
partition size, scheduling credit and push/pull, and the simulator's transport (send pool, flow model,
pipelined messages), itself. Prints one line per scenario (its shape, the
values pstwin chose, achieved / bound from results.json's `bound`) and the distribution of that ratio
(min, median, p90, max). `--set` is passed to every run (e.g. `--set ps.partition_bytes=4096000` to
pin a field). The same seed gives the same family and, the simulator being deterministic, the same
figures. `--floor` reruns every scenario above 1.10 with each of the given partition sizes (the credit
then follows the size, as for a scenario that sets it) and prints each scenario's best, its fastest
run (chosen included) over the lowest of those runs' bounds (the bound counts the job's smallest
partition), and their distribution: what a partition size picked per scenario with hindsight would
give, the floor a rule of these fields can approach. Exits 1 if a run
fails or breaks an invariant.
"""

import argparse
import concurrent.futures
import json
import math
import os
import random
import subprocess
import sys

BANDWIDTHS_GBPS = [1, 2.5, 5, 10, 25, 40]


MAX_PUSHED_MB = 1000
# A mixed host's NIC: the cluster's, or one or two generations older (1/2, 1/4 of it).
MIXED_FACTORS = [1, 0.5, 0.25]


def gbps(value):
    return f"{value * 1000:g}Mbps"


def generate(seed, count):
    """Scenario shapes drawn from `seed`: a list of dicts, the TOML written by to_toml."""
    rng = random.Random(seed)
    family = []
    for index in range(count):
        workers = round(math.exp(rng.uniform(math.log(2), math.log(64))))
        servers = rng.randint(1, 8)
        # The simulator's cost grows with workers x model (messages x concurrent flows): at most
        # MAX_PUSHED_MB pushed per iteration, so the family runs in minutes.
        model_mb = round(math.exp(rng.uniform(math.log(1), math.log(min(500, MAX_PUSHED_MB / workers)))), 1)
        tensors = rng.randint(1, 40)
        base = rng.choice(BANDWIDTHS_GBPS)
        latency_us = rng.choice([5, 10, 25, 50])
        # Hosts: h0 the scheduler, h1..hS the servers, then the workers.
        links = {}
        kind = rng.choice(["homogeneous", "mixed-servers", "mixed-workers", "mixed-both"])
        if kind in ("mixed-servers", "mixed-both"):
            for s in range(servers):
                links[f"h{1 + s}"] = base * rng.choice(MIXED_FACTORS)
        if kind in ("mixed-workers", "mixed-both"):
            for w in range(workers):
                links[f"h{1 + servers + w}"] = base * rng.choice(MIXED_FACTORS)
        family.append(
            {
                "name": f"lb_family_{seed}_{index}",
                "workers": workers,
                "servers": servers,
                "model_mb": model_mb,
                "tensors": tensors,
                "bandwidth_gbps": base,
                "latency_us": latency_us,
                "kind": kind,
                "links": links,
            }
        )
    return family


def to_toml(shape, iterations):
    lines = [
        f'name = "{shape["name"]}"',
        f'description = "lb_family: {shape["kind"]}"',
        "seed = 1",
        "",
        "[cluster]",
        'topology = "star"',
        f'host_bandwidth = "{gbps(shape["bandwidth_gbps"])}"',
        f'host_latency = "{shape["latency_us"]}us"',
    ]
    for host, bandwidth in sorted(shape["links"].items(), key=lambda item: int(item[0][1:])):
        lines += ["", f"[cluster.links.{host}]", f'bandwidth = "{gbps(bandwidth)}"']
    lines += [
        "",
        "[roles]",
        f'servers = {shape["servers"]}',
        f'workers = {shape["workers"]}',
        "",
        "[ps]",
        'mode = "sync"',
        'balancing = "lb"',
        "",
        "[workload]",
        f'model_bytes = "{shape["model_mb"]:g}MB"',
        f'tensors = {shape["tensors"]}',
        'compute = "0s"',
        f"iterations = {iterations}",
        'payload = "phantom"',
        "",
        "[output]",
        "trace = false",
        "",
    ]
    return "\n".join(lines)


def run_one(pstwin, out, shape, iterations, sets, variant=""):
    directory = os.path.join(out, shape["name"], variant) if variant else os.path.join(out, shape["name"])
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "scenario.toml")
    with open(path, "w", encoding="utf-8") as file:
        file.write(to_toml(shape, iterations))
    command = [pstwin, "sim", path, "-q", "--out", directory]
    for item in sets:
        command += ["--set", item]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    results_path = os.path.join(directory, "results.json")
    if not os.path.exists(results_path):
        return shape, None, (done.stderr or done.stdout).strip()
    with open(results_path, encoding="utf-8") as file:
        return shape, json.load(file), ""


def quantile(sorted_values, q):
    """Nearest-rank quantile (the value at rank ceil(q n))."""
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def describe(shape):
    mixed = ""
    if shape["links"]:
        values = sorted(set(shape["links"].values()))
        mixed = " links " + "/".join(f"{v:g}" for v in values)
    return (
        f'{shape["workers"]:>2}w x {shape["servers"]}s {shape["model_mb"]:>6g} MB {shape["tensors"]:>2}t '
        f'{shape["bandwidth_gbps"]:>4g} Gb/s {shape["latency_us"]:>2} us {shape["kind"]:<13}{mixed}'
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1, help="family seed (default 1)")
    parser.add_argument("--count", type=int, default=24, help="scenarios in the family (default 24)")
    parser.add_argument("--iterations", type=int, default=5, help="iterations per run (2 probe, default 5)")
    parser.add_argument("--pstwin", default="./build/pstwin", help="the pstwin binary (default ./build/pstwin)")
    parser.add_argument("--out", default=None, help="output directory (default pstwin-out/lb_family_SEED)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="simulations at once (default 2)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="FIELD=VALUE for every run")
    parser.add_argument("--floor", default="", help="partition sizes (bytes, comma-separated) to rerun "
                        "each scenario above 1.10 with")
    args = parser.parse_args()
    if args.count < 1 or args.iterations < 3:
        parser.error("--count must be >= 1 and --iterations >= 3 (iterations 0 and 1 are probes)")
    out = args.out or f"pstwin-out/lb_family_{args.seed}"
    family = generate(args.seed, args.count)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda s: run_one(args.pstwin, out, s, args.iterations, args.sets), family))

    ratios = []
    by_scenario = {}
    failed = 0
    print(f"lb_family seed {args.seed}: {len(family)} scenarios, {args.iterations} iterations each, out {out}")
    print(f'{"#":>3} {"scenario":<62} {"chosen (partition, credit, push_pull)":<34} {"bound s":>9} '
          f'{"achieved s":>10} {"ratio":>6} {"wall s":>6}')
    for index, (shape, result, error) in enumerate(results):
        if result is None or not result.get("completed") or result["invariants"]["violation_count"] > 0:
            failed += 1
            reason = error or (result or {}).get("failure") or "invariant violations"
            print(f"{index:>3} {describe(shape):<62} FAILED: {reason}")
            continue
        bound = result["bound"]
        # No balanced iteration (every decision a probe): the run's own mean stands for it.
        balanced = bound["achieved_s"] > 0
        achieved = bound["achieved_s"] if balanced else result["mean_iteration_s"]
        ratio = achieved / bound["time_s"]
        ratios.append(ratio)
        by_scenario[index] = (achieved, bound["time_s"])
        chosen = result.get("lb", {}).get("chosen")
        chosen_text = (
            f'{chosen["partition_bytes"]} B, {chosen["scheduling_credit"]}, '
            f'{"fused" if chosen["fused"] else "separate"}'
            if chosen
            else "-"
        )
        print(f"{index:>3} {describe(shape):<62} {chosen_text:<34} {bound['time_s']:>9.4f} "
              f"{achieved:>10.4f} {ratio:>6.3f} {result['wall_s']:>6.1f}"
              + ("" if balanced else "  (no balanced iteration: mean of all)"))
    if ratios:
        ordered = sorted(ratios)
        print(f"achieved / bound over {len(ordered)} runs: min {ordered[0]:.3f}  median "
              f"{quantile(ordered, 0.5):.3f}  p90 {quantile(ordered, 0.9):.3f}  max {ordered[-1]:.3f}")
    if args.floor and ratios:
        failed += floor(args, out, family, by_scenario)
    if failed:
        print(f"{failed} run(s) failed", file=sys.stderr)
        return 1
    return 0


def achieved_and_bound(result):
    """(achieved, bound) of a clean run, or None."""
    if result is None or not result.get("completed") or result["invariants"]["violation_count"] > 0:
        return None
    bound = result["bound"]
    return (bound["achieved_s"] if bound["achieved_s"] > 0 else result["mean_iteration_s"]), bound["time_s"]


def floor(args, out, family, by_scenario):
    """Reruns the scenarios above 1.10 with each size of --floor; prints each one's best. Failed runs.

    The bound counts the job's smallest partition, so runs of one scenario at different sizes have
    different bounds: a scenario's best is its fastest run over the lowest of their bounds."""
    sizes = [int(size) for size in args.floor.split(",") if size]
    above = [index for index, (achieved, bound) in sorted(by_scenario.items()) if achieved > 1.10 * bound]
    todo = [(index, size) for index in above for size in sizes]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(
            pool.map(
                lambda job: run_one(
                    args.pstwin, out, family[job[0]], args.iterations,
                    args.sets + [f"ps.partition_bytes={job[1]}"], f"p{job[1]}"),
                todo))
    failed = 0
    fastest = {index: achieved for index, (achieved, _) in by_scenario.items()}
    lowest = {index: bound for index, (_, bound) in by_scenario.items()}
    print(f"floor: scenarios above 1.10 rerun with partitions of {', '.join(str(s) for s in sizes)} B")
    for (index, size), (_, result, _) in zip(todo, runs):
        measured = achieved_and_bound(result)
        if measured is None:
            failed += 1
            print(f"{index:>3} {size:>8} B FAILED")
            continue
        achieved, bound = measured
        fastest[index] = min(fastest[index], achieved)
        lowest[index] = min(lowest[index], bound)
        print(f"{index:>3} {size:>8} B achieved {achieved:.4f} s, bound {bound:.4f} s: {achieved / bound:.3f}")
    best = {index: fastest[index] / lowest[index] for index in by_scenario}
    for index in above:
        chosen_achieved, chosen_bound = by_scenario[index]
        print(f"{index:>3} over the lowest bound ({lowest[index]:.4f} s): chosen "
              f"{chosen_achieved / lowest[index]:.3f}, fastest {best[index]:.3f}")
    ordered = sorted(best.values())
    print(f"best of chosen and --floor over {len(ordered)} runs: min {ordered[0]:.3f}  median "
          f"{quantile(ordered, 0.5):.3f}  p90 {quantile(ordered, 0.9):.3f}  max {ordered[-1]:.3f}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
