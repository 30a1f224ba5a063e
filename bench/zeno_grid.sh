#!/usr/bin/env bash
# The rule x attack x mode grid of docs/ROBUSTNESS.md: one `pstwin sim` per cell on a base scenario,
# one CSV row per run (final test accuracy, validators' accept counts, simulated and wall seconds).
#   bench/zeno_grid.sh [--pstwin BIN] [--scenario FILE] [--async-scenario FILE] [--out DIR] [--modes "sync async"]
#                      [--rules "mean median ..."] [--async-rules "mean zeno++"] [--attacks "none sign-flip ..."]
#                      [-j JOBS] [--set FIELD=VALUE]...
# Rules that score against held-out data (zeno, zenops, zeno++, validation-only) run with roles.validators = 1 (or the
# base scenario's, if larger); the others on the servers with 0 validators. Sync cells run on --scenario,
# async cells on --async-scenario (its own optimiser: the sync one diverges in async mode, ROBUSTNESS.md).
# Needs jq (.ci/setup).
set -euo pipefail
pstwin=./build/pstwin
scenario=scenarios/zeno_sync_1v.toml
async_scenario=scenarios/zeno_async_1v.toml
out=pstwin-out/zeno_grid
modes="sync async"
rules="mean median trimmed-mean krum centered-clipping zeno zenops"
async_rules="mean zeno++"
attacks="none sign-flip alie ipm"
jobs=1
sets=()
while (($#)); do
  case "$1" in
    --pstwin) pstwin=$2; shift 2 ;;
    --scenario) scenario=$2; shift 2 ;;
    --async-scenario) async_scenario=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --rules) rules=$2; shift 2 ;;
    --async-rules) async_rules=$2; shift 2 ;;
    --attacks) attacks=$2; shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "zeno_grid: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
command -v jq >/dev/null || { echo "zeno_grid: jq is missing: run .ci/setup" >&2; exit 2; }
validators_of() { "$pstwin" check "$1" | sed -n 's/^validators = //p' | head -1; }
base_validators=$(validators_of "$scenario")
async_validators=$(validators_of "$async_scenario")
mkdir -p "$out"
cells=()
for mode in $modes; do
  list=$rules
  [[ $mode == async ]] && list=$async_rules
  for rule in $list; do
    for attack in $attacks; do cells+=("$mode $rule $attack"); done
  done
done
run_cell() {
  read -r mode rule attack <<<"$1"
  local validators=0 base=$scenario wanted=$base_validators
  [[ $mode == async ]] && base=$async_scenario wanted=$async_validators
  case "$rule" in zeno | zenops | zeno++ | validation-only) validators=$((wanted > 1 ? wanted : 1)) ;; esac
  local dir="$out/$mode-$rule-$attack"
  "$pstwin" sim "$base" --out "$dir" --set "ps.mode=$mode" --set "zeno.rule=$rule" \
    --set "roles.validators=$validators" --set "attack.kind=$attack" "${sets[@]}" >"$dir.log" 2>&1 || true
}
export -f run_cell
export pstwin scenario async_scenario out base_validators async_validators
export sets_text="${sets[*]:-}"
printf '%s\n' "${cells[@]}" | xargs -P "$jobs" -I{} bash -c 'sets=($sets_text); run_cell "$@"' _ {}
csv="$out/grid.csv"
echo "mode,rule,attack,validators,final_accuracy,accepted,judged,run_time_s,wall_s,ok" >"$csv"
for cell in "${cells[@]}"; do
  read -r mode rule attack <<<"$cell"
  json="$out/$mode-$rule-$attack/results.json"
  if [[ -f $json ]]; then
    jq -r --arg m "$mode" --arg r "$rule" --arg a "$attack" \
      '[$m, $r, $a, ([.nodes[] | select(.role == "validator")] | length), (.accuracy.final // ""),
        (.validation.accepted // ""), (.validation.judged // ""), .run_time_s, .wall_s,
        (.completed and .invariants.violation_count == 0)] | @csv' "$json" | tr -d '"' >>"$csv"
  else
    echo "$mode,$rule,$attack,,,,,,,false" >>"$csv"
  fi
done
if command -v column >/dev/null; then column -s, -t "$csv"; else cat "$csv"; fi
echo "zeno_grid: $csv"
