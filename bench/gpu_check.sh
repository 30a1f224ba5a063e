#!/usr/bin/env bash
# The GPU path on a machine with a GPU, in one go (docs/HARDWARE.md): checks the build dependencies,
# configures and builds pstwin with CUDA, prints nvidia-smi's summary, runs the CUDA tests, the
# crossed-line race on the GPU path (legacy staging names: violations expected; per-rank: none),
# `pstwin sim` against `pstwin run` on the quickstart with workload.device = "cuda" (same model digest),
# the MLP's training step on the GPU (workload.kind = "mlp": the real mlp_quick job's test accuracy
# within 1 point of the CPU run's; the twin with "cuda" gives the CPU model digest),
# and ps.local_reduce = "nccl": the twin against shm, and on the GPUs what their number allows (one GPU:
# a communicator of one rank in the Cuda tests, and the refusal of two workers on one GPU; two or more:
# a real 2 hosts x 2 GPUs job against the twin's model).
# One PASS or FAIL line per check; exits 1 if any check failed, 2 if it could not build.
# Installs nothing. Run it from the repository root of a clone; it needs no build directory.
#
# usage: bench/gpu_check.sh [OUT_DIR] [--no-gpu]
#   OUT_DIR   where every log and results.json goes (default ./gpu-check-out)
#   --no-gpu  rehearsal on a machine without a GPU: the same steps, but the CUDA tests are expected to
#             skip, the real jobs run with workload.device = "cpu" (the simulator still models "cuda")
#             and a real "nccl" job must be refused naming the missing device
# Environment: JOBS (build parallelism, default 16).
set -u
cd "$(dirname "$0")/.." || exit 2

OUT=./gpu-check-out
GPU=1
for arg in "$@"; do
  case "$arg" in
    --no-gpu) GPU=0 ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_check: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) OUT=$arg ;;
  esac
done
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
JOBS=${JOBS:-16}
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
START=$SECONDS
FAILED=0
BIN=./build/pstwin
TESTS=./build/tests/pstwin_tests
# The device the real jobs use: the GPU, or in a rehearsal the host.
REAL_DEVICE=cuda
((GPU)) || REAL_DEVICE=cpu

log() { echo "[gpu_check $((SECONDS - START))s] $*"; }
result() {  # result PASS|FAIL NAME DETAIL
  local line="$1: $2${3:+ ($3)}"
  echo "$line" | tee -a "$SUMMARY"
  [[ $1 == FAIL ]] && FAILED=1
  return 0
}
json() {  # json FILE PYTHON-EXPRESSION-OVER-r
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null
}

# ------------------------------------------------------------------------------ 1. dependencies
log "checking build dependencies"
missing=()
need_command() {  # need_command COMMAND WHAT
  command -v "$1" >/dev/null 2>&1 || missing+=("$2 (command '$1')")
}
need_command cmake "CMake >= 3.25 (Debian/Ubuntu: cmake)"
need_command ninja "Ninja (ninja-build)"
need_command pkg-config "pkg-config (pkg-config)"
need_command c++ "a C++20 compiler (build-essential / g++)"
need_command python3 "Python 3 (python3; the test suite's CMake needs it)"
if command -v cmake >/dev/null 2>&1; then
  version=$(cmake --version | head -1 | grep -oE '[0-9]+\.[0-9]+(\.[0-9]+)?')
  if [[ $(printf '%s\n3.25\n' "$version" | sort -V | head -1) != 3.25 ]]; then
    missing+=("CMake >= 3.25 (found $version; CMakePresets.json needs 3.25)")
  fi
fi
NVCC=${CUDACXX:-}
[[ -z $NVCC ]] && NVCC=$(command -v nvcc 2>/dev/null)
[[ -z $NVCC && -x /usr/local/cuda/bin/nvcc ]] && NVCC=/usr/local/cuda/bin/nvcc
[[ -z $NVCC ]] && missing+=("nvcc, the CUDA compiler (CUDA toolkit; not on PATH, not /usr/local/cuda/bin/nvcc, CUDACXX unset)")
if command -v pkg-config >/dev/null 2>&1; then
  pkg-config --exists 'simgrid >= 3.32' ||
    missing+=("SimGrid >= 3.32 with pkg-config file (libsimgrid-dev; found: $(pkg-config --modversion simgrid 2>/dev/null || echo none))")
  pkg-config --exists libzmq || missing+=("ZeroMQ (libzmq3-dev; pkg-config libzmq)")
  pkg-config --exists libisal || missing+=("ISA-L (libisal-dev; pkg-config libisal)")
fi
need_header() {  # need_header "HEADER[|ALTERNATIVE]" WHAT
  command -v c++ >/dev/null 2>&1 || return 0
  local h
  IFS='|' read -ra alternatives <<<"$1"
  for h in "${alternatives[@]}"; do
    echo "#include <$h>" | c++ -std=c++20 -E -x c++ - -I/usr/include/eigen3 >/dev/null 2>&1 && return 0
  done
  missing+=("$2 (header <${alternatives[0]}>)")
}
need_header "toml++/toml.hpp|toml++/toml.h" "toml++ (libtomlplusplus-dev)"
need_header "CLI/CLI.hpp" "CLI11 (libcli11-dev)"
need_header "nlohmann/json.hpp" "nlohmann/json (nlohmann-json3-dev)"
need_header "zlib.h" "zlib (zlib1g-dev)"
need_header "gtest/gtest.h" "GoogleTest (libgtest-dev)"
need_header "Eigen/Core|eigen3/Eigen/Core" "Eigen 3 (libeigen3-dev)"
need_header "fmt/core.h" "fmt (libfmt-dev)"
need_header "zmq.h" "ZeroMQ headers (libzmq3-dev)"
if ((GPU)); then
  command -v nvidia-smi >/dev/null 2>&1 || missing+=("nvidia-smi (the NVIDIA driver; or pass --no-gpu for a rehearsal)")
fi
if ((${#missing[@]})); then
  result FAIL "build dependencies" "${#missing[@]} missing"
  printf '  missing: %s\n' "${missing[@]}" | tee -a "$SUMMARY"
  echo "gpu_check: install the missing dependencies (.ci/setup lists the Debian packages) and rerun" | tee -a "$SUMMARY"
  exit 2
fi
result PASS "build dependencies" "cmake $(cmake --version | head -1 | grep -oE '[0-9.]+$'), nvcc $("$NVCC" --version | grep -oE 'release [0-9.]+' | cut -d' ' -f2), simgrid $(pkg-config --modversion simgrid)"

# ------------------------------------------------------------------------------ 2. the GPU
if ((GPU)); then
  log "nvidia-smi"
  {
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max,compute_cap \
      --format=csv 2>&1 || true
    nvidia-smi 2>&1 || true
  } | tee "$OUT/nvidia-smi.txt"
  if nvidia-smi -L >/dev/null 2>&1; then
    result PASS "GPU visible" "$(nvidia-smi -L | head -1)"
  else
    result FAIL "GPU visible" "nvidia-smi -L failed: see $OUT/nvidia-smi.txt"
  fi
else
  log "--no-gpu: no nvidia-smi; real jobs run with workload.device = cpu"
fi

# ------------------------------------------------------------------------------ 3. configure and build
log "configuring (cmake --preset default -DPSTWIN_CUDA=ON) -> $OUT/configure.log"
configure=(cmake --preset default -DPSTWIN_CUDA=ON -DPSTWIN_BUILD_BENCH=OFF "-DCMAKE_CUDA_COMPILER=$NVCC")
configured=0
timeout 180 "${configure[@]}" >"$OUT/configure.log" 2>&1 && configured=1
if ((!configured)) && grep -qiE "unsupported (GNU|clang|Microsoft).*version|-allow-unsupported-compiler" "$OUT/configure.log"; then
  # A host compiler newer than this nvcc supports: one small kernel builds fine with the override.
  log "nvcc refuses this host compiler's version: configuring again with -allow-unsupported-compiler"
  rm -rf build/CMakeCache.txt build/CMakeFiles
  timeout 180 "${configure[@]}" -DCMAKE_CUDA_FLAGS=-allow-unsupported-compiler >"$OUT/configure.log" 2>&1 &&
    configured=1
fi
if ((!configured)); then
  result FAIL "configure" "see $OUT/configure.log"
  grep -E "Could NOT find|Could not find|not found|CMake Error|Error" "$OUT/configure.log" | head -20
  exit 2
fi
grep -E "pstwin: CUDA device path|Found CUDAToolkit|CUDA compiler identification" "$OUT/configure.log"
if ! grep -q "pstwin: CUDA device path ON" "$OUT/configure.log"; then
  result FAIL "configure" "CUDA device path not enabled: see $OUT/configure.log"
  exit 2
fi
result PASS "configure" "CUDA device path ON"
NCCL=0
if grep -q "pstwin: NCCL local reduce ON" "$OUT/configure.log"; then
  NCCL=1
  result PASS "configure NCCL" "ps.local_reduce = nccl built"
else
  result FAIL "configure NCCL" "NCCL not found (nccl.h, libnccl): ps.local_reduce = nccl is refused; see $OUT/configure.log"
fi
log "building pstwin pstwin_tests with -j$JOBS -> $OUT/build.log"
build_start=$SECONDS
if ! timeout 420 cmake --build build --target pstwin pstwin_tests -j"$JOBS" >"$OUT/build.log" 2>&1; then
  result FAIL "build" "see $OUT/build.log"
  grep -E "error|Error" "$OUT/build.log" | head -20
  exit 2
fi
result PASS "build" "$((SECONDS - build_start)) s"
"$BIN" --version | tee -a "$SUMMARY"

# ------------------------------------------------------------------------------ 4. CUDA tests
log "CUDA tests: $TESTS --gtest_filter='Cuda.*' -> $OUT/cuda-tests.log"
timeout 300 "$TESTS" --gtest_filter='Cuda.*' --gtest_color=no >"$OUT/cuda-tests.log" 2>&1
status=$?
grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|no CUDA device" "$OUT/cuda-tests.log"
ran=$(grep -oE "^\[==========\] [0-9]+ tests? from" "$OUT/cuda-tests.log" | head -1 | grep -oE "[0-9]+")
skipped=$(grep -oE "^\[  SKIPPED \] [0-9]+ test" "$OUT/cuda-tests.log" | grep -oE "[0-9]+" | head -1)
skipped=${skipped:-0}
# Skips a GPU machine may have: the Cuda.Nccl* tests that need more GPUs than it has (or fewer).
by_count=$(grep -cE "needs [0-9]+ GPUs and this machine has|GPUs: each of a host's" "$OUT/cuda-tests.log")
if ((status != 0)); then
  result FAIL "CUDA tests" "exit $status: see $OUT/cuda-tests.log"
elif [[ -z $ran || $ran -eq 0 ]]; then
  result FAIL "CUDA tests" "no Cuda.* test ran: see $OUT/cuda-tests.log"
elif ((GPU && skipped > by_count)); then
  result FAIL "CUDA tests" "$skipped of $ran skipped although a GPU should be here: $(grep -m1 -E 'no CUDA device|built without' "$OUT/cuda-tests.log")"
elif ((!GPU && skipped != ran)); then
  result FAIL "CUDA tests" "--no-gpu: expected all $ran to skip, $skipped did"
elif ((GPU)); then
  result PASS "CUDA tests" "$((ran - skipped)) passed, $skipped skipped for this machine's GPU count"
  grep -E "needs [0-9]+ GPUs and this machine has|GPUs: each of a host's" "$OUT/cuda-tests.log" | sort | uniq -c
else
  result PASS "CUDA tests" "--no-gpu: all $ran skipped, as expected without a GPU"
fi
log "device model tests: $TESTS --gtest_filter='Device.*' -> $OUT/device-tests.log"
if timeout 180 "$TESTS" --gtest_filter='Device.*' --gtest_color=no >"$OUT/device-tests.log" 2>&1; then
  result PASS "device model tests" "$(grep -cE '^\[       OK \]' "$OUT/device-tests.log") passed, $(grep -cE '^\[  SKIPPED \] Device' "$OUT/device-tests.log") skipped"
else
  result FAIL "device model tests" "see $OUT/device-tests.log"
fi

# ------------------------------------------------------------------------------ 5. crossed line
# run_job NAME TIMEOUT ARGS...: `pstwin run` into $OUT/NAME (results.json there, log beside it).
run_job() {
  local name=$1 limit=$2
  shift 2
  echo "  \$ pstwin run $* --out $OUT/$name" >>"$SUMMARY"
  timeout "$limit" "$BIN" run "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
}
aggregates() {  # "violated of checked" of a results.json
  json "$1" "'%d of %d' % (r['invariants']['by_invariant']['aggregates']['violated'], r['invariants']['by_invariant']['aggregates']['checked'])"
}
crossed=(scenarios/crossed_line.toml --set "workload.device=$REAL_DEVICE")
log "crossed line, legacy-key-only staging names on the $REAL_DEVICE path (violations expected)"
# The brief's command first; the race is real timing, so a clean run is retried in lock-step (no
# compute jitter, 30 iterations), as tests/test_run.cpp does.
legacy_found=""
for attempt in 0 1 2; do
  extra=()
  ((attempt > 0)) && extra=(--set perturbation.compute_jitter=0ms --set workload.iterations=30)
  run_job "crossed-legacy-$attempt" 120 "${crossed[@]}" --set staging.naming=legacy-key-only "${extra[@]}"
  status=$?
  counts=$(aggregates "$OUT/crossed-legacy-$attempt/results.json")
  log "  attempt $attempt: exit $status, aggregates violated: ${counts:-no results.json}"
  if ((status == 1)) && [[ -n $counts && ${counts%% *} -gt 0 ]]; then
    legacy_found="$counts aggregates crossed (attempt $attempt, exit 1)"
    break
  fi
  if ((status != 0 && status != 1)); then
    legacy_found="error"
    result FAIL "crossed line, legacy naming, $REAL_DEVICE" "exit $status: see $OUT/crossed-legacy-$attempt.log"
    tail -5 "$OUT/crossed-legacy-$attempt.log"
    break
  fi
done
if [[ -z $legacy_found ]]; then
  result FAIL "crossed line, legacy naming, $REAL_DEVICE" "no crossed aggregate in 3 runs"
elif [[ $legacy_found != error ]]; then
  result PASS "crossed line, legacy naming, $REAL_DEVICE" "$legacy_found"
  grep -m1 -E "every element is off by|crossed line" "$OUT/crossed-legacy-$attempt.log" | cut -c1-300
fi
log "crossed line, per-rank staging names on the $REAL_DEVICE path (no violation expected)"
run_job crossed-per-rank 120 "${crossed[@]}" --set staging.naming=per-rank --set perturbation.compute_jitter=0ms \
  --set workload.iterations=30
status=$?
counts=$(aggregates "$OUT/crossed-per-rank/results.json")
if ((status == 0)) && [[ -n $counts && ${counts%% *} -eq 0 ]]; then
  result PASS "crossed line, per-rank naming, $REAL_DEVICE" "$counts aggregates crossed"
else
  result FAIL "crossed line, per-rank naming, $REAL_DEVICE" "exit $status, ${counts:-no results.json}: see $OUT/crossed-per-rank.log"
  tail -5 "$OUT/crossed-per-rank.log"
fi

# ------------------------------------------------------------------------------ 6. the twin
log "quickstart: pstwin sim (device = cuda, modelled) vs pstwin run (device = $REAL_DEVICE)"
echo "  \$ pstwin sim scenarios/quickstart.toml --set workload.device=cuda --out $OUT/quickstart-sim" >>"$SUMMARY"
timeout 120 "$BIN" sim scenarios/quickstart.toml --set workload.device=cuda --out "$OUT/quickstart-sim" \
  >"$OUT/quickstart-sim.log" 2>&1
sim_status=$?
run_job quickstart-run 120 scenarios/quickstart.toml --set "workload.device=$REAL_DEVICE"
run_status=$?
sim_digest=$(json "$OUT/quickstart-sim/results.json" "r['model_digest']")
run_digest=$(json "$OUT/quickstart-run/results.json" "r['model_digest']")
run_violations=$(json "$OUT/quickstart-run/results.json" "r['invariants']['violation_count']")
if ((sim_status == 0 && run_status == 0)) && [[ -n $sim_digest && $sim_digest == "$run_digest" && $run_violations == 0 ]]; then
  result PASS "quickstart sim vs run, $REAL_DEVICE" "model_digest $sim_digest in both, 0 violations"
else
  result FAIL "quickstart sim vs run, $REAL_DEVICE" "sim exit $sim_status digest '${sim_digest}', run exit $run_status digest '${run_digest}' violations '${run_violations}': see $OUT/quickstart-*.log"
  tail -5 "$OUT/quickstart-run.log"
fi
# For docs/HARDWARE.md: the twin's prediction against the measurement, and the host path beside them.
run_job quickstart-run-cpu 120 scenarios/quickstart.toml --set workload.device=cpu
timeout 120 "$BIN" sim scenarios/quickstart.toml --out "$OUT/quickstart-sim-cpu" >"$OUT/quickstart-sim-cpu.log" 2>&1
mean_ms() { json "$1/results.json" "'%.2f' % (1000 * r['mean_iteration_s'])"; }
echo "  mean iteration (ms): sim cuda $(mean_ms "$OUT/quickstart-sim"), run $REAL_DEVICE $(mean_ms "$OUT/quickstart-run"); sim cpu $(mean_ms "$OUT/quickstart-sim-cpu"), run cpu $(mean_ms "$OUT/quickstart-run-cpu")" |
  tee -a "$SUMMARY"
# The real copy spans (device -> host on the copy lane) against the model's 1 MB / cluster.pcie_bandwidth.
python3 - "$OUT/quickstart-run/trace.json" >>"$SUMMARY" 2>&1 <<'EOF' && tail -1 "$SUMMARY"
import json, statistics, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
copies = sorted(e["dur"] for e in events if e.get("ph") == "X" and e.get("name") == "copy")
pulls = sorted(e["dur"] for e in events if e.get("ph") == "X" and e.get("name") == "pull copy")
# 5 of the quickstart's 7 partitions are 1 MB (1e6 bytes): the median span is a 1 MB copy.
def describe(spans):
    if not spans:
        return "none"
    median = statistics.median(spans)
    return f"{len(spans)} spans, median {median:.1f} us = {1e6 / median / 1e3:.2f} GB/s for 1 MB"
print(f"  real copy-lane spans: copy-in {describe(copies)}; pull copy {describe(pulls)}"
      " (model: cluster.pcie_bandwidth, default 12 GB/s = 83 us for 1 MB)")
EOF

# ------------------------------------------------------------------------------ 6b. the MLP on the GPU
# The step's math on the GPU is close to the CPU's, not bit-identical (cuBLAS sums in another order):
# the trained models are compared by test accuracy; Cuda.MlpStepMatchesTheCpuStep (step 4) holds one
# step's loss and gradient to float tolerance. The twin keeps the CPU math: the same digest as "cpu".
log "mlp_quick: pstwin run on $REAL_DEVICE against the cpu run; pstwin sim with cuda against cpu"
run_job mlp-run-cpu 300 scenarios/mlp_quick.toml --set workload.device=cpu
cpu_status=$?
run_job mlp-run-device 300 scenarios/mlp_quick.toml --set "workload.device=$REAL_DEVICE"
device_status=$?
cpu_accuracy=$(json "$OUT/mlp-run-cpu/results.json" "r['accuracy']['final']")
device_accuracy=$(json "$OUT/mlp-run-device/results.json" "r['accuracy']['final']")
device_violations=$(json "$OUT/mlp-run-device/results.json" "r['invariants']['violation_count']")
if ((cpu_status == 0 && device_status == 0)) && [[ $device_violations == 0 ]] &&
  python3 -c "import sys; c, d = float('$cpu_accuracy'), float('$device_accuracy'); sys.exit(not (d > 0.8 and abs(d - c) <= 0.01))" 2>/dev/null; then
  result PASS "mlp_quick run, $REAL_DEVICE vs cpu" "final test accuracy $device_accuracy vs $cpu_accuracy, 0 violations"
else
  result FAIL "mlp_quick run, $REAL_DEVICE vs cpu" "exit $device_status/$cpu_status, accuracy '$device_accuracy' vs '$cpu_accuracy' (need within 0.01, above 0.8), violations '$device_violations': see $OUT/mlp-run-*.log"
  tail -5 "$OUT/mlp-run-device.log"
fi
echo "  mean iteration (ms), mlp_quick: run $REAL_DEVICE $(mean_ms "$OUT/mlp-run-device"), run cpu $(mean_ms "$OUT/mlp-run-cpu")" |
  tee -a "$SUMMARY"
timeout 120 "$BIN" sim scenarios/mlp_quick.toml --set workload.device=cuda --out "$OUT/mlp-sim-cuda" \
  >"$OUT/mlp-sim-cuda.log" 2>&1
sim_cuda_status=$?
timeout 120 "$BIN" sim scenarios/mlp_quick.toml --out "$OUT/mlp-sim-cpu" >"$OUT/mlp-sim-cpu.log" 2>&1
sim_cpu_status=$?
cuda_digest=$(json "$OUT/mlp-sim-cuda/results.json" "r['model_digest']")
cpu_digest=$(json "$OUT/mlp-sim-cpu/results.json" "r['model_digest']")
if ((sim_cuda_status == 0 && sim_cpu_status == 0)) && [[ -n $cuda_digest && $cuda_digest == "$cpu_digest" ]]; then
  result PASS "mlp_quick sim, cuda vs cpu" "model_digest $cuda_digest in both"
else
  result FAIL "mlp_quick sim, cuda vs cpu" "exit $sim_cuda_status/$sim_cpu_status, digests '$cuda_digest'/'$cpu_digest': see $OUT/mlp-sim-*.log"
fi

# ------------------------------------------------------------------------------ 7. nccl local reduce
if ((NCCL)); then
  lr=(scenarios/local_reduce_2x4.toml --set workload.device=cuda)
  log "local reduce: pstwin sim with nccl (cuda) against shm (cpu) on 2 hosts x 4 workers"
  echo "  \$ pstwin sim ${lr[*]} --set ps.local_reduce=nccl --out $OUT/nccl-sim" >>"$SUMMARY"
  timeout 180 "$BIN" sim "${lr[@]}" --set ps.local_reduce=nccl --out "$OUT/nccl-sim" >"$OUT/nccl-sim.log" 2>&1
  nccl_status=$?
  timeout 180 "$BIN" sim scenarios/local_reduce_2x4.toml --out "$OUT/shm-sim" >"$OUT/shm-sim.log" 2>&1
  shm_status=$?
  nccl_digest=$(json "$OUT/nccl-sim/results.json" "r['model_digest']")
  shm_digest=$(json "$OUT/shm-sim/results.json" "r['model_digest']")
  nccl_bytes=$(json "$OUT/nccl-sim/results.json" "r['cross_host']['push_pull_bytes']")
  shm_bytes=$(json "$OUT/shm-sim/results.json" "r['cross_host']['push_pull_bytes']")
  ratio=$(json "$OUT/nccl-sim/results.json" "'%.3f' % (r['mean_iteration_s'] / r['bound']['time_s'])")
  if ((nccl_status == 0 && shm_status == 0)) && [[ -n $nccl_digest && $nccl_digest == "$shm_digest" &&
    $nccl_bytes == "$shm_bytes" ]] && python3 -c "import sys; sys.exit(not 1 <= float('$ratio') <= 1.05)" 2>/dev/null; then
    result PASS "nccl sim vs shm sim" "model_digest $nccl_digest in both, cross-host push/pull bytes $nccl_bytes in both, sim at $ratio x its bound"
  else
    result FAIL "nccl sim vs shm sim" "exit $nccl_status/$shm_status, digests '$nccl_digest'/'$shm_digest', bytes '$nccl_bytes'/'$shm_bytes', $ratio x bound: see $OUT/nccl-sim.log"
  fi
  gpus=0
  ((GPU)) && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if ((!GPU)); then
    log "local reduce: pstwin run with nccl and no GPU (refused, exit 2, naming the device)"
    run_job nccl-run-nogpu 60 "${lr[@]}" --set ps.local_reduce=nccl
    status=$?
    if ((status == 2)) && grep -q 'workload.device = "cuda": no CUDA device' "$OUT/nccl-run-nogpu.log"; then
      result PASS "nccl run without a GPU" "exit 2: $(grep -m1 -oE 'no CUDA device: [^(]*' "$OUT/nccl-run-nogpu.log" | sed 's/ *$//')"
    else
      result FAIL "nccl run without a GPU" "exit $status: see $OUT/nccl-run-nogpu.log"
    fi
  elif ((gpus < 2)); then
    # One GPU: NCCL cannot put two ranks of a host on it; the run must say so before starting.
    log "local reduce: pstwin run with nccl, 4 workers per host on $gpus GPU (refused, exit 2)"
    run_job nccl-run-shared 60 "${lr[@]}" --set ps.local_reduce=nccl
    status=$?
    if ((status == 2)) && grep -q 'would share cuda:0' "$OUT/nccl-run-shared.log"; then
      result PASS "nccl run, workers sharing a GPU refused" "$(grep -m1 -oE 'workers [0-9]+ and [0-9]+ of host [a-z0-9]+ would share cuda:[0-9]+' "$OUT/nccl-run-shared.log")"
    else
      result FAIL "nccl run, workers sharing a GPU refused" "exit $status: see $OUT/nccl-run-shared.log"
    fi
    echo "  nccl between GPUs: not run (needs 2 GPUs; the Cuda tests ran a communicator of one rank)" | tee -a "$SUMMARY"
  else
    log "local reduce: pstwin run with nccl on 2 hosts x 2 GPUs against the twin"
    two=("${lr[@]}" --set roles.workers=4 --set 'roles.worker_hosts=["h3", "h3", "h4", "h4"]')
    timeout 180 "$BIN" sim "${two[@]}" --set ps.local_reduce=nccl --out "$OUT/nccl2-sim" >"$OUT/nccl2-sim.log" 2>&1
    run_job nccl2-run 300 "${two[@]}" --set ps.local_reduce=nccl
    status=$?
    sim_digest=$(json "$OUT/nccl2-sim/results.json" "r['model_digest']")
    run_digest=$(json "$OUT/nccl2-run/results.json" "r['model_digest']")
    run_violations=$(json "$OUT/nccl2-run/results.json" "r['invariants']['violation_count']")
    if ((status == 0)) && [[ -n $sim_digest && $sim_digest == "$run_digest" && $run_violations == 0 ]]; then
      result PASS "nccl run vs sim, 2 hosts x 2 GPUs" "model_digest $run_digest in both, 0 violations"
    else
      result FAIL "nccl run vs sim, 2 hosts x 2 GPUs" "run exit $status, digests '$sim_digest'/'$run_digest', violations '$run_violations': see $OUT/nccl2-run.log"
      tail -5 "$OUT/nccl2-run.log"
    fi
    echo "  mean iteration (ms), nccl 2x2: sim $(mean_ms "$OUT/nccl2-sim"), run $(mean_ms "$OUT/nccl2-run")" | tee -a "$SUMMARY"
  fi
fi

log "done in $((SECONDS - START)) s; summary in $SUMMARY"
if ((FAILED)); then
  echo "gpu_check: FAIL" | tee -a "$SUMMARY"
  exit 1
fi
echo "gpu_check: PASS" | tee -a "$SUMMARY"
exit 0
