#!/usr/bin/env python3
"""Runs one ps-lite application as a job of real processes on 127.0.0.1, as ps-lite's tests/local.sh
does: a scheduler, SERVERS servers and WORKERS worker processes of BINARY, configured by DMLC_* only
(no DMLC_WORKER_ID: the scheduler ranks the workers). Prints every node's output, prefixed.

Usage: run_job.py [--servers S] [--workers W] [--worker-processes P] [--role-arg] [--expect-fail TEXT]
                  [--env NAME=VALUE] -- BINARY [ARGS...]
  --worker-processes  worker processes started (default W; ps-lite's tests/local_multi_workers.sh: 1)
  --role-arg          append the role (scheduler, server, worker) to the arguments, as local_multi_workers.sh
  --worker-ids        give worker i DMLC_WORKER_ID=i (`pstwin node` needs it; ps-lite applications do not)
  --expect-fail TEXT  the job must fail: some node exits non-zero and some node's output contains TEXT
Exit status 0 when the job ended as expected, 1 otherwise. A job that has not ended after --limit seconds
(default 300) is killed and fails: a hang guard, not a timing assertion.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--worker-processes", type=int)
    parser.add_argument("--role-arg", action="store_true")
    parser.add_argument("--worker-ids", action="store_true")
    parser.add_argument("--expect-fail")
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--limit", type=float, default=300)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no BINARY given")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DMLC_", "BYTEPS_", "PS_"))}
    base.update({"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(free_port()),
                 "DMLC_NUM_SERVER": str(args.servers), "DMLC_NUM_WORKER": str(args.workers)})
    for item in args.env:
        name, _, value = item.partition("=")
        base[name] = value
    roles = ["scheduler"] + ["server"] * args.servers + ["worker"] * (
        args.workers if args.worker_processes is None else args.worker_processes)
    nodes = []
    with tempfile.TemporaryDirectory() as logs:
        for index, role in enumerate(roles):
            env = dict(base, DMLC_ROLE=role)
            if role == "worker" and args.worker_ids:
                env["DMLC_WORKER_ID"] = str(index - 1 - args.servers)
            log = open(os.path.join(logs, f"{index}.log"), "w+")
            argv = command + ([role] if args.role_arg else [])
            nodes.append((f"{role} {index}", subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT), log))
        deadline = time.monotonic() + args.limit
        hung = False
        for _, process, _ in nodes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                hung = True
                break
        if hung:
            for _, process, _ in nodes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        failed = False
        outputs = []
        for name, process, log in nodes:
            log.seek(0)
            text = log.read()
            outputs.append(text)
            print(f"--- {name}: exit status {process.returncode}")
            for line in text.splitlines():
                print(f"[{name}] {line}")
            failed |= process.returncode != 0
    if hung:
        print(f"run_job: the job had not ended after {args.limit} s; killed")
        return 1
    if args.expect_fail is not None:
        if not failed:
            print("run_job: every node exited 0, but the job was expected to fail")
            return 1
        if not any(args.expect_fail in text for text in outputs):
            print(f"run_job: the job failed, but no node's output contains {args.expect_fail!r}")
            return 1
        return 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
