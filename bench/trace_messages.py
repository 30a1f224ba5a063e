#!/usr/bin/env python3
"""Per-message views of a pstwin trace.json (simulated or real): where a key's time goes.

  trace_messages.py oneway RUN_DIR ITERATION      one-way times per sender/receiver class
  trace_messages.py keys RUN_DIR ITERATION PROCESS [N]   one aggregator's keys: pushes in, replies out
  trace_messages.py credit RUN_DIR ITERATION       reply received -> next push queued, per worker
  trace_messages.py bursts RUN_DIR ITERATION       per worker: gaps between its pushes, pushes per burst
                                                   (gaps under 10 us), round trip (push queued -> reply)

RUN_DIR holds trace.json (`pstwin sim` or `pstwin run`). PROCESS is a process name as the trace shows
it ("server 0", "worker 3"). Times in ms. A send span starts when the message was queued (real runs:
the send pool's enqueue; the simulator: when its connection took it), a receive span ends when the
receiver had it, so one-way = receive end - send start. Lanes are named by the peer's role and rank
(send->server 0, recv<-worker 3; node ids, send->8, in older traces), matched to processes by the
messages both ends saw (docs/FPT.md, "Per-key view").
"""
import bisect
import collections
import json
import statistics
import sys

BULK = ("push_pull", "push_pull response", "push", "pull response")


def load(run_dir):
    with open(run_dir + "/trace.json") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    return events, lanes, names


def peer(lane):
    """The peer a send->/recv<- lane names: a role and rank ("server 0"), or a node id in older traces."""
    name = lane[6:]
    return int(name) if name.isdigit() else name


def spans(events, lanes, iteration):
    """(sends, receives): (name, sender node-or-pid, receiver, key) -> time, plus node <-> pid votes."""
    sends, recvs = {}, {}
    for e in events:
        if e.get("ph") != "X" or e.get("name") not in BULK:
            continue
        args = e.get("args", {})
        if args.get("iteration") != iteration:
            continue
        lane = lanes.get((e["pid"], e["tid"]), "")
        if e.get("cat") == "send" and lane.startswith("send->"):
            sends[(e["name"], e["pid"], peer(lane), args["key"])] = e["ts"]
        elif e.get("cat") == "receive" and lane.startswith("recv<-"):
            recvs[(e["name"], peer(lane), e["pid"], args["key"])] = e["ts"] + e["dur"]
    # A send from pid P to node N matches a receive at pid Q from node M: N is Q, M is P.
    votes = collections.Counter()
    by_name_key = collections.defaultdict(list)
    for (name, node_from, pid_to, key) in recvs:
        by_name_key[(name, key)].append((node_from, pid_to))
    for (name, pid_from, node_to, key) in sends:
        for node_from, pid_to in by_name_key.get((name, key), []):
            votes[(node_to, pid_to)] += 1
            votes[(node_from, pid_from)] += 1
    pid_of = {}
    for (node, pid), _ in votes.most_common():
        if node not in pid_of and pid not in pid_of.values():
            pid_of[node] = pid
    matched = {}
    for (name, pid_from, node_to, key), t in sends.items():
        pid_to = pid_of.get(node_to)
        node_from = next((n for n, p in pid_of.items() if p == pid_from), None)
        t_end = recvs.get((name, node_from, pid_to, key))
        if t_end is not None:
            matched[(name, pid_from, pid_to, key)] = (t, t_end)
    return matched


def kind(names, pid):
    return names.get(pid, str(pid)).split()[0]


def oneway(run_dir, iteration):
    events, lanes, names = load(run_dir)
    groups = collections.defaultdict(list)
    for (name, a, b, _key), (t0, t1) in spans(events, lanes, iteration).items():
        label_a = names.get(a, str(a)) if kind(names, a) == "server" else kind(names, a)
        label_b = names.get(b, str(b)) if kind(names, b) == "server" else kind(names, b)
        groups[(name, label_a, label_b)].append((t1 - t0) / 1e3)
    for (name, a, b), v in sorted(groups.items()):
        v.sort()
        print(f"{name:20s} {a:9s} -> {b:9s} n={len(v):5d} median {statistics.median(v):7.1f}  p90 {v[int(0.9 * len(v))]:7.1f} ms")


def keys(run_dir, iteration, process, count):
    events, lanes, names = load(run_dir)
    pid = next((p for p, n in names.items() if n == process), None)
    if pid is None:
        sys.exit(f"no process named {process!r}; the trace has: {', '.join(sorted(names.values()))}")
    pushes, replies_out, replies_in = (collections.defaultdict(list) for _ in range(3))
    for (name, a, b, key), (t0, t1) in spans(events, lanes, iteration).items():
        if name == "push_pull" and b == pid:
            pushes[key].append(t1)
        elif name == "push_pull response" and a == pid:
            replies_out[key].append(t0)
            replies_in[key].append(t1)
    if not pushes:
        sys.exit(f"{process} aggregated no key in iteration {iteration}")
    order = sorted(pushes, key=lambda k: min(pushes[k]))
    t0 = min(min(v) for v in pushes.values())
    span = lambda v: f"{(min(v) - t0) / 1e3:8.1f}..{(max(v) - t0) / 1e3:8.1f}" if v else "       -"
    print(f"key: pushes arrive | replies leave | replies arrive (ms from the first push of the iteration)")
    for key in order[:count]:
        print(f"{key:>8} {len(pushes[key])} {span(pushes[key])} | {span(replies_out[key])} | {span(replies_in[key])}")


def credit(run_dir, iteration):
    events, lanes, names = load(run_dir)
    replies = collections.defaultdict(list)
    pushes = collections.defaultdict(list)
    for (name, a, b, _key), (t0, t1) in spans(events, lanes, iteration).items():
        if name == "push_pull response":
            replies[(b, a)].append(t1)
        elif name == "push_pull":
            pushes[(a, b)].append(t0)
    gaps = collections.defaultdict(list)
    for pair, sent in pushes.items():
        got = sorted(replies.get(pair, []))
        for t in sorted(sent):
            i = bisect.bisect_right(got, t)
            if i > 0:
                gaps[kind(names, pair[1])].append((t - got[i - 1]) / 1e3)
    for to, v in sorted(gaps.items()):
        v.sort()
        print(f"push to a {to}: n={len(v)} p10 {v[len(v) // 10]:.2f} p50 {v[len(v) // 2]:.2f} p90 {v[9 * len(v) // 10]:.2f} ms after the last reply from it")


def bursts(run_dir, iteration):
    """Whether a worker's pushes go out evenly spaced or in bursts of its credit (docs/PERFORMANCE.md)."""
    events, lanes, names = load(run_dir)
    sent = collections.defaultdict(list)
    rounds = collections.defaultdict(list)
    replies = {}
    matched = spans(events, lanes, iteration)
    for (name, a, b, key), (t0, t1) in matched.items():
        if name == "push_pull response":
            replies[(b, a, key)] = t1
    for (name, a, b, key), (t0, t1) in matched.items():
        if name == "push_pull":
            sent[a].append(t0)
            if (a, b, key) in replies:
                rounds[a].append(replies[(a, b, key)] - t0)
    pct = lambda v, q: v[min(len(v) - 1, int(q * len(v)))]
    for pid in sorted(sent):
        times = sorted(sent[pid])
        gaps = sorted(b - a for a, b in zip(times, times[1:]))
        if not gaps:
            continue
        burst_count = 1 + sum(1 for a, b in zip(times, times[1:]) if b - a >= 10)
        trip = sorted(rounds[pid])
        print(f"{names.get(pid, str(pid)):9s} pushes {len(times):6d}, gap p10 {pct(gaps, 0.1):7.1f} p50 {pct(gaps, 0.5):7.1f}"
              f" p90 {pct(gaps, 0.9):7.1f} us, {len(times) / burst_count:5.2f} pushes per burst, round trip"
              f" p50 {pct(trip, 0.5) if trip else float('nan'):7.1f} p90 {pct(trip, 0.9) if trip else float('nan'):7.1f} us")


def main(argv):
    if len(argv) < 4 or argv[1] not in ("oneway", "keys", "credit", "bursts"):
        sys.exit(__doc__)
    run_dir, iteration = argv[2], int(argv[3])
    if argv[1] == "oneway":
        oneway(run_dir, iteration)
    elif argv[1] == "credit":
        credit(run_dir, iteration)
    elif argv[1] == "bursts":
        bursts(run_dir, iteration)
    else:
        if len(argv) < 5:
            sys.exit(__doc__)
        keys(run_dir, iteration, argv[4], int(argv[5]) if len(argv) > 5 else 12)


if __name__ == "__main__":
    main(sys.argv)
