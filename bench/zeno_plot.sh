#!/usr/bin/env bash
# Accuracy-vs-iteration PNGs of a zeno grid (docs/ROBUSTNESS.md): one plot per mode and attack, one curve
# per rule, from each cell's results.json `accuracy.curve` ({iteration, time_s, accuracy} points).
#   bench/zeno_plot.sh GRID_DIR [OUT_DIR]      (OUT_DIR: docs/img; GRID_DIR as bench/zeno_grid.sh writes it:
#                                                MODE-RULE-ATTACK/results.json)
# Writes OUT_DIR/zeno_MODE_ATTACK.png. Needs gnuplot (gnuplot-nox) and jq (.ci/setup).
set -euo pipefail
grid=${1:?usage: bench/zeno_plot.sh GRID_DIR [OUT_DIR]}
out=${2:-docs/img}
for tool in gnuplot jq; do
  command -v "$tool" >/dev/null || { echo "zeno_plot: $tool is missing: run .ci/setup" >&2; exit 2; }
done
[[ -d $grid ]] || { echo "zeno_plot: grid directory '$grid' does not exist (run bench/zeno_grid.sh)" >&2; exit 2; }
mkdir -p "$out"
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
declare -A plots=()
shopt -s nullglob
for json in "$grid"/*/results.json; do
  cell=$(basename "$(dirname "$json")")  # MODE-RULE-ATTACK; rules and attacks may contain '-'
  mode=${cell%%-*}
  rest=${cell#*-}
  attack=""
  for a in sign-flip norm-matched bit-flip label-flip none gaussian alie ipm validator; do
    [[ $rest == *-"$a" ]] && { attack=$a; break; }
  done
  [[ -n $attack ]] || { echo "zeno_plot: skipping '$cell' (not MODE-RULE-ATTACK)" >&2; continue; }
  rule=${rest%-"$attack"}
  jq -r '.accuracy.curve[]? | "\(.iteration) \(.accuracy)"' "$json" >"$data/$mode@$attack@$rule.dat"
  [[ -s $data/$mode@$attack@$rule.dat ]] || { echo "zeno_plot: '$cell' has no accuracy curve" >&2; continue; }
  plots["$mode@$attack"]+="$rule "
done
((${#plots[@]})) || { echo "zeno_plot: no results.json with an accuracy curve under '$grid'" >&2; exit 1; }
for key in $(printf '%s\n' "${!plots[@]}" | sort); do
  mode=${key%@*}
  attack=${key#*@}
  png="$out/zeno_${mode}_${attack}.png"
  series=()
  for rule in $(printf '%s\n' ${plots[$key]} | sort); do
    series+=("'$data/$key@$rule.dat' using 1:2 with linespoints pointsize 0.5 title '$rule'")
  done
  gnuplot <<EOF
set terminal pngcairo size 800,500 font ",10"
set output '$png'
set title "$mode mode, attack: $attack (Fashion-MNIST MLP, 8 workers)"
set xlabel 'iteration'
set ylabel 'test accuracy'
set yrange [0:1]
set grid
set key bottom right
plot $(IFS=,; echo "${series[*]}")
EOF
  echo "$png"
done
