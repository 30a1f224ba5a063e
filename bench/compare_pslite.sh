#!/bin/bash
# pstwin's loopback bench (bench/bench_loopback) and dmlc/ps-lite's equivalent harness (the anchors'
# harness/pslite_bench: 1 scheduler, 1 server, 2 workers on 127.0.0.1, the same figures and
# definitions), run interleaved in one run (pstwin, ps-lite, pstwin, ...), then the medians of each
# figure and their ratios. Sizes are binary (4 KiB = 4096 bytes) on both sides, as the harness reads
# "4KB". The machine's load is printed before and after: quote ratios, never the absolute figures
# alone (docs/PERFORMANCE.md).
#
# usage: bench/compare_pslite.sh [--rounds N] [--van zmq|epoll|ucx] [--sizes 4KB,1MB,16MB] [--anchors DIR]
#                                [--set FIELD=VALUE]...
#   --anchors: the folder holding ps-lite/ and harness/ (default: ../shared/anchors beside the
#   repository). It is copied to build/anchors and built there once (ps-lite needs libprotobuf-dev
#   and protobuf-compiler); bench_loopback must be built (cmake --build build --target bench_loopback).
#   --set: passed on to bench_loopback (pstwin's side only), e.g. --set ps.partition_bytes=4096000 to
#   split each value as pstwin's default partitioning does (the harness sends one message per value).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ANCHORS="$ROOT/../shared/anchors"
ROUNDS=3
VAN=epoll
SIZES=4KB,1MB,16MB
SETS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --van) VAN=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --anchors) ANCHORS=$2; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    *) echo "compare_pslite.sh: unknown argument '$1'; usage: $0 [--rounds N] [--van zmq|epoll|ucx] [--sizes 4KB,1MB,16MB] [--anchors DIR] [--set FIELD=VALUE]..." >&2; exit 2 ;;
  esac
done
case "$ROUNDS" in ''|*[!0-9]*|0) echo "compare_pslite.sh: --rounds '$ROUNDS': expected a whole number >= 1" >&2; exit 2 ;; esac

BENCH="$ROOT/build/bench/bench_loopback"
if [ ! -x "$BENCH" ]; then
  echo "compare_pslite.sh: $BENCH not built; run: cmake --build build --target bench_loopback" >&2
  exit 2
fi
WORK="$ROOT/build/anchors"
if [ ! -x "$WORK/harness/pslite_bench" ]; then
  if [ ! -d "$ANCHORS/ps-lite" ] || [ ! -d "$ANCHORS/harness" ]; then
    echo "compare_pslite.sh: no ps-lite/ and harness/ under $ANCHORS; pass --anchors DIR" >&2
    exit 2
  fi
  echo "building ps-lite and its harness in $WORK (once)"
  mkdir -p "$WORK"
  cp -r "$ANCHORS/ps-lite" "$ANCHORS/harness" "$WORK/"
  make -C "$WORK/ps-lite" -j2 ps DEPS_PATH=/usr PROTOC=/usr/bin/protoc ADD_CFLAGS="-std=c++14" > "$WORK/build.log" 2>&1 ||
    { echo "compare_pslite.sh: building ps-lite failed (libprotobuf-dev and protobuf-compiler installed?); see $WORK/build.log" >&2; exit 1; }
  make -C "$WORK/harness" >> "$WORK/build.log" 2>&1 ||
    { echo "compare_pslite.sh: building the harness failed; see $WORK/build.log" >&2; exit 1; }
fi

# pstwin reads 4KB as 4000 bytes, the harness as 4096: give pstwin the binary unit.
PSTWIN_SIZES=$(echo "$SIZES" | sed -e 's/KB/KiB/g' -e 's/MB/MiB/g' -e 's/GB/GiB/g')
OUT=$(mktemp -d -t pstwin-vs-pslite.XXXXXX)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; van $VAN; sizes $SIZES; $ROUNDS rounds;${SETS[*]:+ pstwin ${SETS[*]};} logs in $OUT"
for round in $(seq 1 "$ROUNDS"); do
  "$BENCH" --van "$VAN" --sizes "$PSTWIN_SIZES" "${SETS[@]}" > "$OUT/pstwin.$round.txt" 2>&1 ||
    { echo "compare_pslite.sh: bench_loopback failed; see $OUT/pstwin.$round.txt" >&2; exit 1; }
  OUT="$OUT/pslite.$round" BIN="$WORK/harness/pslite_bench" "$WORK/harness/run_pslite.sh" --sizes "$SIZES" \
    > "$OUT/pslite.$round.txt" 2>&1 ||
    { echo "compare_pslite.sh: the ps-lite harness failed; see $OUT/pslite.$round.txt" >&2; exit 1; }
  echo "round $round of $ROUNDS done"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT" "$ROUNDS" "$SIZES" <<'EOF'
import re, statistics, sys
out, rounds, sizes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
pstwin_line = re.compile(r"^(\S+)\s+pstwin blocking p50\s+([\d.]+) us p99\s+([\d.]+) us \| raw TCP ping-pong p50\s+([\d.]+) us"
                         r" p99\s+([\d.]+) us \| pstwin pipelined\s+([\d.]+) GB/s \| raw TCP stream\s+([\d.]+) GB/s")
pslite_line = re.compile(r"^(\S+)\s+ps-lite blocking p50\s+([\d.]+) us p99\s+([\d.]+) us \| ps-lite pipelined\s+([\d.]+) GB/s")
figures = {}  # (size index, name) -> list over rounds
def add(i, name, value):
    figures.setdefault((i, name), []).append(float(value))
for r in range(1, rounds + 1):
    rows = [m for m in map(pstwin_line.match, open(f"{out}/pstwin.{r}.txt")) if m]
    peer = [m for m in map(pslite_line.match, open(f"{out}/pslite.{r}.txt")) if m]
    if len(rows) != len(sizes) or len(peer) != len(sizes):
        sys.exit(f"round {r}: expected {len(sizes)} figure lines from each bench, got {len(rows)} and {len(peer)}; see {out}")
    for i, (m, p) in enumerate(zip(rows, peer)):
        for name, value in zip(("p50", "p99", "tcp_p50", "tcp_p99", "pipe", "stream"), m.groups()[1:]):
            add(i, name, value)
        for name, value in zip(("ps_p50", "ps_p99", "ps_pipe"), p.groups()[1:]):
            add(i, name, value)
med = lambda i, name: statistics.median(figures[(i, name)])
print(f"\nmedians of {rounds} interleaved rounds; ratios > 1 favour pstwin (latency: ps-lite / pstwin)")
print("| value | pstwin p50 / p99 | ps-lite p50 / p99 | p50 ratio | p99 ratio | pstwin pipelined | ps-lite pipelined | ratio"
      " | raw TCP p50 | pstwin p50 / raw | raw TCP stream | pstwin / stream |")
print("| --- " * 13 + "|")
for i, size in enumerate(sizes):
    p50, p99, ps50, ps99 = med(i, "p50"), med(i, "p99"), med(i, "ps_p50"), med(i, "ps_p99")
    pipe, ps_pipe, tcp50, stream = med(i, "pipe"), med(i, "ps_pipe"), med(i, "tcp_p50"), med(i, "stream")
    print(f"| {size} | {p50:.1f} / {p99:.1f} us | {ps50:.1f} / {ps99:.1f} us | {ps50 / p50:.2f} | {ps99 / p99:.2f}"
          f" | {pipe:.3f} GB/s | {ps_pipe:.3f} GB/s | {pipe / ps_pipe:.2f} | {tcp50:.1f} us | {p50 / tcp50:.1f} x"
          f" | {stream:.3f} GB/s | {pipe / stream:.2f} |")
EOF
