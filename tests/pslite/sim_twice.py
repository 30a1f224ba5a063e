#!/usr/bin/env python3
"""Runs a ps-lite application in the simulator twice (pstwin-simapp) and checks that both runs give
byte-identical outputs: stdout and stderr (the application's own log lines included), results.json,
trace.json and resolved.toml, all but the wall time.

Usage: sim_twice.py SIMAPP SCENARIO [--servers S] [--workers W] [--role-arg] [--set FIELD=VALUE]...
                    [--expect-fail TEXT] [--min-run-time SECONDS] [--expect-positive FIELD]...
                    -- MODULE [ARGS...]
  --expect-fail TEXT     the run must fail (a non-zero exit status) and its output contain TEXT
  --min-run-time SECONDS results.json's run_time_s (simulated) must be at least this
  --expect-positive FIELD  results.json's FIELD (dotted, e.g. faults.resend.resent) must be > 0
Exit status 0 when both runs ended as expected and agree, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def run_once(args, out_dir):
    command = [args.simapp, args.scenario, args.module, *args.app_args, "--out", out_dir,
               "--set", f"roles.servers={args.servers}", "--set", f"roles.workers={args.workers}"]
    for field in args.set:
        command += ["--set", field]
    if args.role_arg:
        command.append("--role-arg")
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    # The summary's wall time is the one line that may differ.
    output = "".join(line for line in (done.stdout + done.stderr).replace(out_dir, "OUT").splitlines(True)
                     if not line.startswith("  wall: "))
    files = {}
    for name in ("results.json", "trace.json", "resolved.toml"):
        path = os.path.join(out_dir, name)
        if os.path.exists(path):
            with open(path) as f:
                files[name] = f.read()
    if "results.json" in files:
        results = json.loads(files["results.json"])
        results.pop("wall_s", None)
        results["replay"] = results.get("replay", "").replace(out_dir, "OUT")
        files["results.json"] = results
    return done.returncode, output, files


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("simapp")
    parser.add_argument("scenario")
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--role-arg", action="store_true")
    parser.add_argument("--set", action="append", default=[])
    parser.add_argument("--expect-fail")
    parser.add_argument("--min-run-time", type=float)
    parser.add_argument("--expect-positive", action="append", default=[])
    parser.add_argument("module")
    parser.add_argument("app_args", nargs="*")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        runs = [run_once(args, os.path.join(scratch, f"run{i}")) for i in (1, 2)]
    status, output, files = runs[0]
    print(output)
    if args.expect_fail:
        if status == 0 or args.expect_fail not in output:
            sys.exit(f"sim_twice: expected the run to fail with \"{args.expect_fail}\"; status {status}")
    elif status != 0:
        sys.exit(f"sim_twice: the simulated job failed (status {status})")
    if "results.json" not in files and not args.expect_fail:
        sys.exit("sim_twice: no results.json")
    if args.min_run_time is not None and files["results.json"]["run_time_s"] < args.min_run_time:
        sys.exit(f"sim_twice: run_time_s {files['results.json']['run_time_s']} < {args.min_run_time}")
    for field in args.expect_positive:
        value = files["results.json"]
        for part in field.split("."):
            value = value.get(part, 0) if isinstance(value, dict) else 0
        if not isinstance(value, (int, float)) or value <= 0:
            sys.exit(f"sim_twice: results.json's {field} is {value}, expected > 0")
    other_status, other_output, other_files = runs[1]
    if other_status != status or other_output != output:
        print(other_output)
        sys.exit("sim_twice: the second run's exit status or output differs from the first's")
    for name in files:
        if other_files.get(name) != files[name]:
            sys.exit(f"sim_twice: the second run's {name} differs from the first's")
    summary = ""
    if "results.json" in files:
        summary = (f"; simulated run time {files['results.json']['run_time_s']} s, "
                   f"{files['results.json']['messages']} messages")
    print(f"sim_twice: two runs, identical ({', '.join(sorted(files) + ['output'])}){summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
