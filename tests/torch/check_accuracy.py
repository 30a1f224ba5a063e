#!/usr/bin/env python3
"""Trains train_fmnist.py as a pstwin.torch job (2 workers, 1 server, a scheduler: processes on
127.0.0.1 started with DMLC_* variables by tests/pslite/run_job.py, or with --pstwin by
`pstwin run scenarios/quickstart.toml --set roles.workers=2 --set roles.servers=1 -- COMMAND`) and in one process without
BytePS (same seed, same samples), and fails unless the job's test accuracy is within --tolerance
(accuracy points, percent) of the one-process run. Prints "skipped: REASON" and exits 0 where torch
or the data set is missing.

Usage: check_accuracy.py [--fp16] [--pstwin BINARY] [--tolerance 1.0] [-- extra train_fmnist.py arguments]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

from requirements import missing_requirement

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_JOB = os.path.join(HERE, "..", "pslite", "run_job.py")
SCRIPT = os.path.join(HERE, "train_fmnist.py")
QUICKSTART = os.path.join(HERE, "..", "..", "scenarios", "quickstart.toml")


def accuracy_of(output, what):
    found = re.findall(r"accuracy=([0-9.]+) samples=([0-9]+)", output)
    if len(found) != 1:
        sys.exit(f"check_accuracy: the {what} printed {len(found)} accuracy lines, expected 1:\n{output}")
    return float(found[0][0]) * 100, int(found[0][1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tolerance", type=float, default=1.0)
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--min-accuracy", type=float, default=70.0, help="percent: proof that both runs learned")
    parser.add_argument("--pstwin", help="launch the job with this binary's `pstwin run -- COMMAND` instead")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    extra = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    missing = missing_requirement()
    if missing:
        print(f"skipped: {missing}")
        return 0
    train = [sys.executable, SCRIPT] + (["--fp16-pushpull"] if args.fp16 else []) + extra
    with tempfile.TemporaryDirectory() as out:
        if args.pstwin:
            launcher = [args.pstwin, "run", QUICKSTART, "--set", "roles.workers=2", "--set", "roles.servers=1",
                        "--out", out, "--"]
        else:
            launcher = [sys.executable, RUN_JOB, "--servers", "1", "--workers", "2", "--"]
        job = subprocess.run(launcher + train, capture_output=True, text=True)
    print(job.stdout + job.stderr)
    if job.returncode != 0:
        sys.exit("check_accuracy: the job failed")
    local = subprocess.run([sys.executable, SCRIPT, "--local", "--workers", "2"] + extra,
                           capture_output=True, text=True)
    print(local.stdout + local.stderr)
    if local.returncode != 0:
        sys.exit("check_accuracy: the one-process run failed")
    job_accuracy, job_samples = accuracy_of(job.stdout, "job")
    local_accuracy, local_samples = accuracy_of(local.stdout, "one-process run")
    print(f"check_accuracy: job {job_accuracy:.2f} %, one process {local_accuracy:.2f} %, "
          f"{job_samples} samples each, tolerance {args.tolerance} points")
    if job_samples != local_samples:
        sys.exit("check_accuracy: the runs saw different numbers of samples")
    if min(job_accuracy, local_accuracy) < args.min_accuracy:
        sys.exit(f"check_accuracy: a run stayed below {args.min_accuracy} %: it did not learn")
    if abs(job_accuracy - local_accuracy) > args.tolerance:
        sys.exit("check_accuracy: the job's accuracy is not within the tolerance of the one-process run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
