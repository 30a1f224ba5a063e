#!/usr/bin/env python3
"""A race in a ps-lite application replays from a seed: runs race_app (pslite/race_app.cpp) in the
simulator with delivery jitter for seeds 1..N, expects both outcomes among them (the race is real and
the seed decides it), then replays the first failing seed and the first passing one and expects the
same outcome and byte-identical output each time.

Usage: race_replay.py SIMAPP SCENARIO MODULE [SEEDS]
"""
import subprocess
import sys
import tempfile

JITTER = "perturbation.delivery_jitter=50us"


def run(simapp, scenario, module, seed, out):
    done = subprocess.run([simapp, scenario, module, "--seed", str(seed), "--set", "roles.servers=1", "--set",
                           "roles.workers=2", "--set", JITTER, "--out", out], capture_output=True, text=True,
                          timeout=300)
    output = "".join(line for line in (done.stdout + done.stderr).splitlines(True) if not line.startswith("  wall: "))
    return done.returncode, output


def main():
    simapp, scenario, module = sys.argv[1:4]
    seeds = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    with tempfile.TemporaryDirectory() as out:
        outcomes = {seed: run(simapp, scenario, module, seed, out) for seed in range(1, seeds + 1)}
        failing = [seed for seed, (status, _) in outcomes.items() if status != 0]
        passing = [seed for seed, (status, _) in outcomes.items() if status == 0]
        print(f"race_replay: seeds 1..{seeds}: worker 0's check failed for {failing}, held for {passing}")
        if not failing or not passing:
            sys.exit("race_replay: expected both outcomes among the seeds: the seed should decide the race")
        for seed in (failing[0], passing[0]):
            again = run(simapp, scenario, module, seed, out)
            if again != outcomes[seed]:
                print(outcomes[seed][1])
                print(again[1])
                sys.exit(f"race_replay: seed {seed} replayed differently")
        status, output = outcomes[failing[0]]
        if "worker 0's push did not land last" not in output or "replay: pstwin-simapp" not in output:
            print(output)
            sys.exit("race_replay: the failing run does not name the check and the replay command")
        print(f"race_replay: seed {failing[0]} fails and seed {passing[0]} passes again, byte for byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
