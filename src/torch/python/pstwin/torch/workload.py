"""Records a training run's workload for the simulator: with PSTWIN_WORKLOAD_RECORD=FILE, worker 0's
DistributedOptimizer writes FILE (JSON: the tensors in layer order with their sizes, the order their
gradients were pushed, and per iteration the forward, per-tensor backward, wait and update times) and
FILE.toml, a scenario `pstwin sim` runs: the job's roles and partition size, the tensors, the
iterations' compute (the fastest tenth's, plus a per-worker jitter whose mean is the median) and its
forward share, with layerwise compute, and the real push_pull path's bandwidth as the hosts' (the
round trip of the last gradient pushed, from its backward's end to the averages in, when no peer was
waited for) (docs/API.md).
"""
import json
import os
import statistics
import time


class WorkloadRecorder:
    """Timestamps of one worker's iterations, as DistributedOptimizer sees them: an iteration runs from
    the end of one step() to the end of the next; each gradient hook marks its tensor's backward end."""

    def __init__(self, path, tensors, workers, servers, partition_bytes):
        self.path = path
        self.tensors = tensors  # [(name, bytes, dtype)] in layer order
        self.workers = workers
        self.servers = servers
        self.partition_bytes = partition_bytes
        self.iterations = []
        self.push_order = []
        self._start = time.perf_counter()
        self._hooks = []
        self._sync_start = None
        self._sync_end = None

    def gradient_ready(self, name):
        self._hooks.append((name, time.perf_counter()))

    def synchronize_started(self):
        self._sync_start = time.perf_counter()

    def synchronize_ended(self):
        self._sync_end = time.perf_counter()

    def step_ended(self):
        end = time.perf_counter()
        if self._hooks and self._sync_start is not None:
            first = self._hooks[0][1]
            last = self._hooks[-1][1]
            backward = {}
            previous = first
            for name, at in self._hooks:
                backward[name] = at - previous
                previous = at
            if not self.push_order:
                self.push_order = [name for name, _ in self._hooks]
            self.iterations.append({
                "iteration_s": end - self._start,
                "forward_s": first - self._start,
                "compute_s": last - self._start,
                "backward_s": backward,
                "wait_s": self._sync_end - self._sync_start,
                "update_s": end - self._sync_end,
            })
        self._start = end
        self._hooks = []
        self._sync_start = None

    def write(self):
        record = {
            "format": "pstwin.torch workload 1",
            "workers": self.workers,
            "servers": self.servers,
            "partition_bytes": self.partition_bytes,
            "tensors": [{"name": n, "bytes": b, "dtype": d} for n, b, d in self.tensors],
            "push_order": self.push_order,
            "iterations": self.iterations,
        }
        with open(self.path, "w") as out:
            json.dump(record, out, indent=1)
        with open(self.path + ".toml", "w") as out:
            out.write(self.scenario())

    def scenario(self):
        """The run as a scenario: the first iterations (warm-up) are left out of the medians."""
        steady = self.iterations[len(self.iterations) // 5:] or self.iterations
        # The optimizer's update follows the pull, before the next forward: the simulator's forward share.
        computes = sorted(i["compute_s"] + i["update_s"] for i in steady)
        median = statistics.median(computes)
        forward = statistics.median(i["forward_s"] + i["update_s"] for i in steady)
        # Workers are not equally fast from one iteration to the next, and a sync round waits for the
        # slowest: the spread is the simulator's per-worker jitter, uniform in [0, jitter] over the
        # fastest tenth's compute, whose mean is the recorded median.
        compute = computes[len(computes) // 10]
        jitter = 2 * (median - compute)
        iteration = statistics.median(i["iteration_s"] for i in steady)
        share = min(0.95, max(0.05, forward / median)) if median > 0 else 1 / 3
        sizes = ", ".join(str(b) for _, b, _ in self.tensors)
        bandwidth = self.push_pull_bandwidth(steady)
        cluster = "" if bandwidth is None else (
            "\n# The push_pull path's bandwidth, as measured: hook, staging copy, the van, the server's sum\n"
            "# and the way back to the gradient, per byte of the last gradient pushed and pulled.\n"
            f"[cluster]\nhost_bandwidth = \"{bandwidth:.0f}Bps\"\n")
        return (f"# Recorded by pstwin.torch (PSTWIN_WORKLOAD_RECORD) from {len(self.iterations)} iterations;\n"
                f"# the real run's median iteration took {iteration * 1e6:.0f} us.\n"
                f'name = "recorded"\n'
                f'description = "a recorded pstwin.torch run: {self.workers} worker(s), {self.servers} server(s)"\n'
                f"\n[roles]\nworkers = {self.workers}\nservers = {self.servers}\n{cluster}"
                f"\n[ps]\nmode = \"sync\"\npartition_bytes = {self.partition_bytes}\n"
                f"\n[workload]\ntensor_bytes = [{sizes}]\ncompute = \"{compute * 1e6:.0f}us\"\n"
                f"layerwise = true\nforward_share = {share:.3f}\niterations = {max(1, len(self.iterations))}\n"
                f"\n[perturbation]\ncompute_jitter = \"{jitter * 1e6:.0f}us\"\n")

    def push_pull_bandwidth(self, steady):
        """Bytes per second of the real push_pull path, or None without a push: the last gradient's push
        leaves at its backward's end, and the iteration waits from there until every average is in
        (its tail: the rest of backward() and step()'s wait, the iteration less its compute and update).
        The fastest tenth's tail is that gradient's round trip, pushed and pulled, with no slower peer
        to wait for (the simulator adds that wait from the compute jitter); per byte moved both ways,
        it is what the simulator's hosts carry."""
        if not self.push_order:
            return None
        sizes = {name: size for name, size, _ in self.tensors}
        tails = sorted(i["iteration_s"] - i["compute_s"] - i["update_s"] for i in steady)
        tail = tails[len(tails) // 10]
        moved = 2 * sizes.get(self.push_order[-1], 0)
        return moved / tail if tail > 0 and moved > 0 else None


def recorder_from_environment(tensors, rank, workers, servers, partition_bytes):
    """A recorder on worker 0 when PSTWIN_WORKLOAD_RECORD names a file, else None."""
    path = os.environ.get("PSTWIN_WORKLOAD_RECORD")
    if not path or rank != 0:
        return None
    return WorkloadRecorder(path, tensors, workers, servers, partition_bytes)
