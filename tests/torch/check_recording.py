#!/usr/bin/env python3
"""Runs train_fmnist.py as a pstwin.torch job (2 workers, 1 server) with PSTWIN_WORKLOAD_RECORD and
checks what worker 0 recorded: the model's tensors in layer order with their sizes, the push order
(backward: last layer first), one entry per iteration with every time present; then runs the scenario
it wrote through `pstwin sim` and checks the simulator ran those tensors for as many iterations, its
median iteration within a factor of 2 of the real one's (both over the iterations after the first
fifth, the warm-up the recorder leaves out too). The factor catches a replay that is wrong (a unit, a
lost compute time, a missing tensor), not one that is imprecise: the real run's timing moves with the
machine's load, so the fidelity figure (within 15 %) is measured by bench/torch_replay.sh and recorded
in docs/PERFORMANCE.md, as every timing target is. Prints "skipped: REASON" and exits 0 where torch or the data set
is missing.

Usage: check_recording.py PSTWIN_BINARY
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

from requirements import missing_requirement

HERE = os.path.dirname(os.path.abspath(__file__))
ITERATIONS = 100
MAX_FACTOR = 2.0  # simulated / real and real / simulated, of the steady iterations' median
# train_fmnist.py's MLP 784-128-64-10, float32: (name, bytes) in layer order.
TENSORS = [("fc1.weight", 784 * 128 * 4), ("fc1.bias", 128 * 4), ("fc2.weight", 128 * 64 * 4),
           ("fc2.bias", 64 * 4), ("fc3.weight", 64 * 10 * 4), ("fc3.bias", 10 * 4)]


def main():
    pstwin = sys.argv[1]
    missing = missing_requirement()
    if missing:
        print(f"skipped: {missing}")
        return 0
    with tempfile.TemporaryDirectory() as out:
        record = os.path.join(out, "workload.json")
        job = subprocess.run([sys.executable, os.path.join(HERE, "..", "pslite", "run_job.py"), "--servers", "1",
                              "--workers", "2", "--env", f"PSTWIN_WORKLOAD_RECORD={record}", "--", sys.executable,
                              os.path.join(HERE, "train_fmnist.py"), "--iterations", str(ITERATIONS)],
                             capture_output=True, text=True)
        print(job.stdout + job.stderr)
        if job.returncode != 0:
            sys.exit("check_recording: the job failed")
        with open(record) as f:
            recorded = json.load(f)
        names = ["Gradient." + name for name, _ in TENSORS]
        assert [t["name"] for t in recorded["tensors"]] == names, recorded["tensors"]
        assert [t["bytes"] for t in recorded["tensors"]] == [b for _, b in TENSORS], recorded["tensors"]
        assert recorded["push_order"] == names[::-1], recorded["push_order"]
        assert (recorded["workers"], recorded["servers"]) == (2, 1), recorded
        assert len(recorded["iterations"]) == ITERATIONS, len(recorded["iterations"])
        for i, it in enumerate(recorded["iterations"]):
            assert sorted(it["backward_s"]) == sorted(names), (i, it)
            assert 0 < it["forward_s"] <= it["compute_s"] < it["iteration_s"], (i, it)
            assert it["wait_s"] >= 0 and it["update_s"] >= 0, (i, it)
        sim = subprocess.run([pstwin, "sim", record + ".toml", "--out", os.path.join(out, "sim")],
                             capture_output=True, text=True)
        print(sim.stdout + sim.stderr)
        if sim.returncode != 0:
            sys.exit("check_recording: pstwin sim refused or failed the recorded scenario")
        with open(os.path.join(out, "sim", "results.json")) as f:
            results = json.load(f)
        assert results["completed"] and len(results["iterations"]) == ITERATIONS, results["iterations"]
        steady = ITERATIONS // 5
        real = statistics.median(it["iteration_s"] for it in recorded["iterations"][steady:])
        simulated = statistics.median(it["time_s"] for it in results["iterations"][steady:])
        error = (simulated - real) / real
        print(f"check_recording: median iteration: real {real * 1e3:.2f} ms, simulated {simulated * 1e3:.2f} ms "
              f"({error * 100:+.1f} %)")
        if max(simulated / real, real / simulated) > MAX_FACTOR:
            sys.exit(f"check_recording: the replay's median iteration is {error * 100:+.1f} % off the real run's "
                     f"(more than a factor of {MAX_FACTOR:g}); the scenario it replayed:\n"
                     + open(record + ".toml").read())
        print("check_recording: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
