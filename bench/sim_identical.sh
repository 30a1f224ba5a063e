#!/bin/bash
# Byte-identity check of the simulator's outputs between two builds: runs each scenario below with
# both `pstwin sim` binaries (results.json with wall_s zeroed, trace.json) and the scale bench at three
# cuts with both `bench_sim_scale` binaries (every line but wall time, rate and peak RSS), then `cmp`s.
# Usage: bench/sim_identical.sh BASE_BUILD_DIR NEW_BUILD_DIR OUT_DIR   (run from the repository root)
set -u
base=$1 new=$2 out=$3
scenarios="quickstart async_quickstart crossed_line saturation_8w2s local_reduce_2x4 lb_4w4s lb_hetero
  lb_hetero_agg lb_switch zeno_sync_2v zeno_async_1v fidelity_4w2s_1gbit priority_layerwise"
cuts=("256 4 1" "1024 16 1" "2048 16 1")
bad=0
for side in base new; do
  dir=${!side}
  mkdir -p "$out/$side"
  for s in $scenarios; do
    "$dir/pstwin" sim "scenarios/$s.toml" -q --out "$out/$side/$s" > "$out/$side/$s.log" 2>&1
    echo "rc=$?" >> "$out/$side/$s.log"
    sed -i -E 's/"wall_s": [0-9.e+-]+/"wall_s": 0/' "$out/$side/$s/results.json"
  done
  for cut in "${cuts[@]}"; do
    read -r w s i <<< "$cut"
    "$dir/bench/bench_sim_scale" scenarios/scale_1024w_16s.toml --set roles.workers="$w" \
      --set roles.servers="$s" --set workload.iterations="$i" 2>&1 |
      grep -v -E '^(wall|messages / wall s|peak RSS) ' > "$out/$side/bench_${w}x${s}x${i}.txt"
  done
done
for s in $scenarios; do
  for f in results.json trace.json "../$s.log"; do
    [ -e "$out/base/$s/$f" ] || [ -e "$out/new/$s/$f" ] || continue
    cmp "$out/base/$s/$f" "$out/new/$s/$f" || bad=1
  done
done
for cut in "${cuts[@]}"; do
  read -r w s i <<< "$cut"
  cmp "$out/base/bench_${w}x${s}x${i}.txt" "$out/new/bench_${w}x${s}x${i}.txt" || bad=1
done
[ "$bad" = 0 ] && echo "identical" || echo "DIFFERENT"
exit "$bad"
