#!/usr/bin/env python3
"""How long pstwin takes to refuse bad input: every scenario, --set, option and environment case of
docs/SECURITY.md's "Scenario and CLI" list, each run N times as a process from the source directory.
Prints per case the exit status, whether stderr names the field, and the median and slowest wall
time, then the slowest of all and the load average (the target: exit 2, the field named, under 2 s).
The tests check exit status and message (tests/test_cli.cpp); timing lives here, where a loaded
machine moves a figure instead of failing a test.

Usage: bench/refusal_times.py [BUILD_DIR] [--runs N]   (docs/SECURITY.md)
"""
import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE_ENV = ("DMLC_ROLE=worker DMLC_PS_ROOT_URI=127.0.0.1 DMLC_PS_ROOT_PORT=1 DMLC_NUM_WORKER=2 "
            "DMLC_NUM_SERVER=1 DMLC_WORKER_ID=0")

# (arguments after `pstwin`, or a full shell command with PSTWIN for the binary; what stderr must name)
CASES = [
    ("sim scenarios/quickstart.toml --set roles.workers=10000000 --out OUT", "roles.workers = 10000000"),
    ("sim scenarios/quickstart.toml --set cluster.hosts=1000000000 --out OUT", "cluster.hosts = 1000000000"),
    ("sim scenarios/quickstart.toml --set workload.model_bytes=1e15 --out OUT", "workload."),
    ("sim scenarios/quickstart.toml --set 'workload.tensor_bytes=[\"10GB\"]' --out OUT", "workload.tensor_bytes"),
    ("sim scenarios/quickstart.toml --set sim.stack_size_kb=1000000000 --out OUT", "sim.stack_size_kb"),
    ("sim scenarios/quickstart.toml --set 'sim.simgrid_config=[\"network/model:Foo\"]' --out OUT",
     "sim.simgrid_config"),
    ("check /dev/zero", "/dev/zero: not a regular file"),
    ("check scenarios/quickstart.toml --set name=../../x", "name = \"../../x\""),
    ("sim scenarios/quickstart.toml --out /dev/null", "--out /dev/null"),
    ("sim scenarios/quickstart.toml --seed -1 --out OUT", "--seed"),
    ("run scenarios/quickstart.toml --seed 18446744073709551616 --out OUT", "--seed"),
    (f"env {NODE_ENV} DMLC_PS_VAN_TYP=epoll PSTWIN node scenarios/quickstart.toml", "DMLC_PS_VAN_TYP"),
    (f"env {NODE_ENV} DMLC_ENABLE_RDMA=yes PSTWIN node scenarios/quickstart.toml", "DMLC_ENABLE_RDMA"),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build", nargs="?", default="build")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    pstwin = os.path.join(os.path.abspath(args.build), "pstwin")
    slowest_of_all = 0.0
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "out")
        for case, names in CASES:
            command = case.replace("OUT", shlex.quote(out))
            command = command.replace("PSTWIN", shlex.quote(pstwin)) if "PSTWIN" in command \
                else shlex.quote(pstwin) + " " + command
            times = []
            for _ in range(args.runs):
                start = time.monotonic()
                result = subprocess.run(command, shell=True, cwd=SOURCE, capture_output=True, text=True)
                times.append(time.monotonic() - start)
            named = names in result.stderr
            ok = result.returncode == 2 and named and not result.stdout and not os.path.exists(out)
            failures += not ok
            slowest_of_all = max(slowest_of_all, max(times))
            print(f"{'ok ' if ok else 'BAD'} exit {result.returncode} {'named' if named else 'NOT NAMED'} "
                  f"median {statistics.median(times) * 1e3:7.1f} ms  slowest {max(times) * 1e3:7.1f} ms  {case}")
    load = os.getloadavg()
    print(f"slowest refusal: {slowest_of_all * 1e3:.1f} ms over {len(CASES)} cases x {args.runs} runs; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
