#!/bin/bash
# pstwin's loopback bench (bench/bench_loopback) and dmlc/ps-lite's equivalent harness (the anchors'
# harness/pslite_bench: 1 scheduler, 1 server, 2 workers on 127.0.0.1, the same figures and
# definitions), run interleaved in one run (pstwin, ps-lite, pstwin, ...), then the medians of each
# figure and their ratios. Sizes are binary (4 KiB = 4096 bytes) on both sides, as the harness reads
# "4KB". The machine's load is printed before and after: quote ratios, never the absolute figures
# alone (docs/PERFORMANCE.md).
#
# usage: bench/compare_pslite.sh [--rounds N] [--van zmq|epoll|ucx] [--sizes 4KB,1MB,16MB] [--anchors DIR]
#                                [--set FIELD=VALUE]... [--floor] [--pslite-fill]
#   --anchors: the folder holding ps-lite/ and harness/ (default: ../shared/anchors beside the
#   repository). It is copied to build/anchors and built there once (ps-lite needs libprotobuf-dev
#   and protobuf-compiler); bench_loopback must be built (cmake --build build --target bench_loopback).
#   --set: passed on to bench_loopback (pstwin's side only), e.g. --set ps.partition_bytes=4096000 to
#   split each value as pstwin's default partitioning does (the harness sends one message per value).
#   --floor: each round also runs bench/bench_floor_large (no PS code: the same bytes over bare sockets)
#   for every size of 64 KB or more, with ps-lite's passes (no fill, no CRC; blocking with the value in
#   one piece and in 256 KiB and 64 KiB chunks, the best kept; pipelined at credit 4) and with pstwin's
#   (fill and CRC), and prints what 1.5x ps-lite would need against what the floor reached.
#   --pslite-fill: the harness writes every value before each push (its --fill), as pstwin's workload
#   does: the same work on both sides. By default the harness pushes the values it wrote once.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ANCHORS="$ROOT/../shared/anchors"
ROUNDS=3
VAN=epoll
SIZES=4KB,1MB,16MB
SETS=()
FLOOR=0
PSLITE_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --van) VAN=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --anchors) ANCHORS=$2; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    --floor) FLOOR=1; shift ;;
    --pslite-fill) PSLITE_ARGS+=(--fill); shift ;;
    *) echo "compare_pslite.sh: unknown argument '$1'; usage: $0 [--rounds N] [--van zmq|epoll|ucx] [--sizes 4KB,1MB,16MB] [--anchors DIR] [--set FIELD=VALUE]... [--floor] [--pslite-fill]" >&2; exit 2 ;;
  esac
done
case "$ROUNDS" in ''|*[!0-9]*|0) echo "compare_pslite.sh: --rounds '$ROUNDS': expected a whole number >= 1" >&2; exit 2 ;; esac

BENCH="$ROOT/build/bench/bench_loopback"
if [ ! -x "$BENCH" ]; then
  echo "compare_pslite.sh: $BENCH not built; run: cmake --build build --target bench_loopback" >&2
  exit 2
fi
FLOOR_BIN="$ROOT/build/bench/bench_floor_large"
if [ "$FLOOR" = 1 ] && [ ! -x "$FLOOR_BIN" ]; then
  echo "compare_pslite.sh: $FLOOR_BIN not built; run: cmake --build build --target bench_floor_large" >&2
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
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; van $VAN; sizes $SIZES; $ROUNDS rounds;${SETS[*]:+ pstwin ${SETS[*]};}${PSLITE_ARGS[*]:+ ps-lite ${PSLITE_ARGS[*]};} logs in $OUT"
for round in $(seq 1 "$ROUNDS"); do
  "$BENCH" --van "$VAN" --sizes "$PSTWIN_SIZES" "${SETS[@]}" > "$OUT/pstwin.$round.txt" 2>&1 ||
    { echo "compare_pslite.sh: bench_loopback failed; see $OUT/pstwin.$round.txt" >&2; exit 1; }
  OUT="$OUT/pslite.$round" BIN="$WORK/harness/pslite_bench" "$WORK/harness/run_pslite.sh" --sizes "$SIZES" "${PSLITE_ARGS[@]}" \
    > "$OUT/pslite.$round.txt" 2>&1 ||
    { echo "compare_pslite.sh: the ps-lite harness failed; see $OUT/pslite.$round.txt" >&2; exit 1; }
  if [ "$FLOOR" = 1 ]; then
    : > "$OUT/floor.$round.txt"
    for size in ${SIZES//,/ }; do
      bytes=$(python3 -c "import sys; s=sys.argv[1]; u={'KB':1<<10,'MB':1<<20,'GB':1<<30}; print(int(s[:-2])*u[s[-2:]] if s[-2:] in u else int(s))" "$size")
      [ "$bytes" -ge 65536 ] || continue
      blocking_rounds=$(( bytes >= 8388608 ? 60 : 400 ))
      for chunk in "$bytes" 262144 65536; do
        [ "$chunk" -le "$bytes" ] || continue
        "$FLOOR_BIN" --size "$bytes" --rounds "$blocking_rounds" --crc 0 --fill 0 --chunk "$chunk" >> "$OUT/floor.$round.txt"
      done
      "$FLOOR_BIN" --size "$bytes" --rounds "$(( blocking_rounds * 2 ))" --crc 0 --fill 0 --credit 4 >> "$OUT/floor.$round.txt"
      "$FLOOR_BIN" --size "$bytes" --rounds "$blocking_rounds" --crc 1 --fill 1 >> "$OUT/floor.$round.txt"
      "$FLOOR_BIN" --size "$bytes" --rounds "$(( blocking_rounds * 2 ))" --crc 1 --fill 1 --credit 4 >> "$OUT/floor.$round.txt"
    done
  fi
  echo "round $round of $ROUNDS done"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT" "$ROUNDS" "$SIZES" "$FLOOR" <<'EOF'
import re, statistics, sys
out, rounds, sizes, floor = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4] == "1"
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
if not floor:
    sys.exit(0)
# The floor: per round the best blocking p50 over the chunkings and the pipelined rate, then medians.
floor_line = re.compile(r"^floor (\d+) B, chunk (\d+) B, credit (\d+), crc (\d), fill (\d): p50 ([\d.]+) us p99 ([\d.]+) us, ([\d.]+) GB/s")
units = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
def to_bytes(size):
    return int(size[:-2]) * units[size[-2:]] if size[-2:] in units else int(size)
best = {}  # (bytes, passes, credit) -> list over rounds
for r in range(1, rounds + 1):
    per_round = {}
    for m in map(floor_line.match, open(f"{out}/floor.{r}.txt")):
        if not m:
            continue
        size, chunk, credit, crc, fill = map(int, m.groups()[:5])
        p50, gbps = float(m.group(6)), float(m.group(8))
        key = (size, "pstwin" if crc else "ps-lite", credit)
        value = gbps if credit > 1 else p50
        old = per_round.get(key)
        per_round[key] = value if old is None else (max(old, value) if credit > 1 else min(old, value))
    for key, value in per_round.items():
        best.setdefault(key, []).append(value)
print("\nthe floor (bench_floor_large: no PS code, one server thread), medians of the per-round best; 1.5x ps-lite is beyond"
      " this floor where it needs a lower p50 or a higher rate than the floor with ps-lite's passes reached")
print("| value | floor p50, ps-lite's passes | floor p50, pstwin's | 1.5x ps-lite needs p50 | floor pipelined, ps-lite's"
      " passes | floor pipelined, pstwin's | 1.5x ps-lite needs | within the floor's reach |")
print("| --- " * 8 + "|")
for i, size in enumerate(sizes):
    b = to_bytes(size)
    if (b, "ps-lite", 1) not in best:
        continue
    f50, fp50 = statistics.median(best[(b, "ps-lite", 1)]), statistics.median(best[(b, "pstwin", 1)])
    fpipe, fppipe = statistics.median(best[(b, "ps-lite", 4)]), statistics.median(best[(b, "pstwin", 4)])
    need50, needpipe = med(i, "ps_p50") / 1.5, med(i, "ps_pipe") * 1.5
    reach = [name for name, ok in (("p50", need50 >= f50), ("pipelined", needpipe <= fpipe)) if ok]
    print(f"| {size} | {f50:.1f} us | {fp50:.1f} us | {need50:.1f} us | {fpipe:.3f} GB/s | {fppipe:.3f} GB/s"
          f" | {needpipe:.3f} GB/s | {', '.join(reach) if reach else 'neither'} |")
EOF
