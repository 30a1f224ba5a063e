#!/usr/bin/env bash
# Launch.MpirunRunsTheQuickstart: `mpirun -np 4 pstwin node` with no DMLC_ROLE: the ranks become the
# scheduler, one server and two workers (docs/ENVIRONMENT.md, "Launchers"), and the job completes;
# the ranks' reports (--report DIR/) merge (`pstwin merge`) into the simulator's model digest.
# Skipped (status 77) where Open MPI is not installed (.ci/setup installs openmpi-bin).
# Usage: launch_mpirun.sh PSTWIN SOURCE_DIR
set -euo pipefail
pstwin=$1 source=$2
if ! command -v mpirun > /dev/null; then
  echo "skipped: mpirun is not installed (bash .ci/setup installs openmpi-bin)"
  exit 77
fi
reports=$(mktemp -d)
trap 'rm -rf "$reports"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
unset DMLC_ROLE DMLC_NUM_WORKER DMLC_WORKER_ID DMLC_PS_ROOT_URI
out=$(DMLC_PS_ROOT_PORT=$port DMLC_NUM_SERVER=1 timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 \
      -x DMLC_PS_ROOT_PORT -x DMLC_NUM_SERVER "$pstwin" node "$source/scenarios/quickstart.toml" \
      --report "$reports/parts/" 2>&1) || {
  echo "$out"
  echo "launch_mpirun: the job failed"
  exit 1
}
echo "$out"
for line in "scheduler" "server rank 0 (node 8)" "worker rank 0 (node 9): 5 iterations" \
            "worker rank 1 (node 11): 5 iterations"; do
  grep -q "pstwin node: $line.*: ok" <<< "$out" || { echo "launch_mpirun: no \"$line ... ok\" line"; exit 1; }
done
for part in scheduler server0 worker0 worker1; do
  [[ -f $reports/parts/$part.json ]] || { echo "launch_mpirun: no $part.json among the ranks' reports"; exit 1; }
done
"$pstwin" merge -q "$reports/parts" --out "$reports/real" || { echo "launch_mpirun: pstwin merge failed"; exit 1; }
"$pstwin" sim -q "$source/scenarios/quickstart.toml" --set roles.servers=1 --set roles.workers=2 \
  --out "$reports/sim" || { echo "launch_mpirun: pstwin sim failed"; exit 1; }
digest() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["model_digest"])' "$1/results.json"; }
real=$(digest "$reports/real") sim=$(digest "$reports/sim")
if [[ -z $sim || $real != "$sim" ]]; then
  echo "launch_mpirun: merged model_digest \"$real\" is not the simulator's \"$sim\""
  exit 1
fi
echo "launch_mpirun: merged model_digest $real equals the simulator's"
