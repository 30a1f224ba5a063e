#!/usr/bin/env bash
# pstwin.torch's recorded workload against the simulator: trains tests/torch/train_fmnist.py as a job
# (2 workers, 1 server, loopback) with PSTWIN_WORKLOAD_RECORD, runs the scenario it wrote with
# `pstwin sim`, and prints the median iteration of both (after the first fifth, the warm-up the
# recorder leaves out), their ratio and the push_pull bandwidth the recording measured.
# Usage: bench/torch_replay.sh [BUILD_DIR] [train_fmnist.py arguments...]   (docs/PERFORMANCE.md)
set -euo pipefail
build=$(realpath "${1:-build}")
shift || true
source=$(cd "$(dirname "$0")/.." && pwd)
python=${PSTWIN_TORCH_PYTHON:-python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
PYTHONPATH="$build/python" "$python" "$source/tests/pslite/run_job.py" --servers 1 --workers 2 \
  --env "PSTWIN_WORKLOAD_RECORD=$out/workload.json" -- "$python" "$source/tests/torch/train_fmnist.py" "$@" \
  | grep "accuracy="
"$build/pstwin" sim "$out/workload.json.toml" --out "$out/sim" -q
"$python" - "$out/workload.json" "$out/sim/results.json" <<'PY'
import json, statistics, sys
record, sim = (json.load(open(p)) for p in sys.argv[1:3])
steady = len(record["iterations"]) // 5
real = statistics.median(i["iteration_s"] for i in record["iterations"][steady:])
wait = statistics.median(i["wait_s"] for i in record["iterations"][steady:])
compute = statistics.median(i["compute_s"] + i["update_s"] for i in record["iterations"][steady:])
simulated = statistics.median(i["time_s"] for i in sim["iterations"][steady:])
bandwidth = [line for line in open(sys.argv[1] + ".toml") if line.startswith("host_bandwidth")]
print(f"real median iteration {real * 1e3:.2f} ms (compute + update {compute * 1e3:.2f} ms, "
      f"wait in synchronize {wait * 1e3:.2f} ms); simulated {simulated * 1e3:.2f} ms; "
      f"simulated / real = {simulated / real:.3f}; {''.join(bandwidth).strip()}")
PY
