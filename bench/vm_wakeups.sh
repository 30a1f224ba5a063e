#!/usr/bin/env bash
# Is a 4 KB figure bound by the machine's thread wake-ups? The epoll van's 4 KB pipelined bench (and
# its context switches, where perf is installed) and both vans' 4 KB blocking latency, first on the
# idle machine, then beside two nice-19 busy loops that keep every vCPU awake while taking next to
# no CPU from the bench (nice 19 against 0: about 1.5 % each). docs/PERFORMANCE.md, "Why 4 KB on the
# development VM is bound by wake-ups". Run it on an otherwise idle machine.
# usage: bench/vm_wakeups.sh BUILD OUT   e.g. bench/vm_wakeups.sh build /tmp/wakeups.txt
set -u
B=$1
OUT=$2
: >"$OUT"
note() { echo "$(date +%T) load $(cut -d' ' -f1 /proc/loadavg) $*" | tee -a "$OUT"; }
pipelined() {
  local count=()
  command -v perf >/dev/null && count=(perf stat -e context-switches)
  "${count[@]}" "$B/bench/bench_loopback" --van epoll --sizes 4KiB --only pipelined --credit 64 \
    --set ps.push_pull=fused 2>&1 | grep -E "^4KB|context-switches" |
    grep -o "pstwin pipelined *[0-9.]* GB/s\|per GB: pipelined [0-9.]*\|^ *[0-9,]* *context-switches" |
    tr -s ' ' | tr '\n' ' '
}
latency() {
  "$B/bench/bench_loopback" --van "$1" --sizes 4KiB --only latency --set ps.push_pull=fused 2>&1 |
    grep '^4KB' | grep -o 'pstwin blocking p50 *[0-9.]* us p99 *[0-9.]* us'
}
measure() {
  for round in 1 2 3; do note "$1: $(pipelined)"; done
  for van in epoll zmq; do note "$1, $van: $(latency "$van")"; done
}
measure idle
spinners=()
for i in 1 2; do
  nice -n 19 sh -c 'while :; do :; done' &
  spinners+=($!)
done
sleep 1
measure "beside two nice-19 busy loops"
kill "${spinners[@]}"
