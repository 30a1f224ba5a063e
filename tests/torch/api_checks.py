#!/usr/bin/env python3
"""pstwin.torch's API checked as a job of processes (tests/pslite/run_job.py: 2 servers, 2 workers,
small BYTEPS_PARTITION_BYTES so tensors are split over both servers). Every worker runs every check;
a failed check raises, the worker exits non-zero and the job fails. Prints "skipped: REASON" and exits
0 on every role where torch is missing.
"""
import os
import sys

try:
    import torch
except ImportError:
    print(f"skipped: {sys.executable} has no torch (Debian: apt-get install python3-torch)")
    sys.exit(0)

import pstwin.torch as bps


def expect_error(kind, text, call):
    try:
        call()
    except kind as error:
        assert text in str(error), f"{kind.__name__} without {text!r}: {error}"
        return
    raise AssertionError(f"expected {kind.__name__} containing {text!r}")


def init_refuses_bad_environment():
    # Checked before the node starts, so a refused init() can be retried.
    for name, value, text in [("BYTEPS_PARTITION_BYTES", "4k", "BYTEPS_PARTITION_BYTES='4k'"),
                              ("BYTEPS_LOCAL_SIZE", "2", "BYTEPS_LOCAL_SIZE=2"),
                              ("BYTEPS_LOCAL_SIZE", "one", "BYTEPS_LOCAL_SIZE='one'")]:
        saved = os.environ.get(name)
        os.environ[name] = value
        expect_error(ValueError, text, bps.init)
        if saved is None:
            del os.environ[name]
        else:
            os.environ[name] = saved
    expect_error(RuntimeError, "call init() first", bps.rank)


def sums_and_averages(rank, size):
    # Values that differ per rank; the sum over ranks r of (r + 1) * x is x * size * (size + 1) / 2.
    total = size * (size + 1) // 2
    for dtype in (torch.float32, torch.float64, torch.float16, torch.int32, torch.int64):
        # Several partitions each; float16 holds every sum exactly below 2048.
        x = torch.arange(1, 601 if dtype == torch.float16 else 1001, dtype=dtype)
        summed = bps.push_pull(x * (rank + 1), average=False, name=f"sum.{dtype}")
        assert torch.equal(summed, x * total), f"{dtype}: {summed[:5]} != {(x * total)[:5]}"
    y = torch.full((3, 5), float(rank + 1))
    averaged = bps.push_pull(y, average=True, name="average")
    assert torch.allclose(averaged, torch.full((3, 5), (size + 1) / 2)), averaged
    assert torch.equal(y, torch.full((3, 5), float(rank + 1))), "push_pull changed its input"


def async_handles(rank, size):
    tensors = [torch.full((257,), float(rank + i)) for i in range(4)]
    handles = [bps.push_pull_async(t, average=False, name=f"async.{i}") for i, t in enumerate(tensors)]
    outputs = [bps.synchronize(h) for h in handles]
    for i, out in enumerate(outputs):
        assert torch.equal(out, torch.full((257,), float(sum(r + i for r in range(size))))), (i, out[:3])
        assert torch.equal(tensors[i], torch.full((257,), float(rank + i))), "the input was changed"
    z = torch.full((10,), float(rank))
    handle = bps.push_pull_async_inplace(z, average=False, name="inplace")
    while not bps.poll(handle):
        pass
    assert bps.synchronize(handle) is z and torch.equal(z, torch.full((10,), float(sum(range(size)))))
    expect_error(ValueError, "is not an open push_pull", lambda: bps.synchronize(handle))
    # Averaging and the same name again, many rounds: each round sums that round's values.
    for round_ in range(20):
        w = torch.full((5,), float(round_ * (rank + 1)))
        bps.push_pull_inplace(w, average=True, name="rounds")
        assert torch.allclose(w, torch.full((5,), round_ * (size + 1) / 2)), (round_, w)


def refusals(rank):
    expect_error(ValueError, "dtype torch.uint8 is not supported",
                 lambda: bps.push_pull(torch.zeros(3, dtype=torch.uint8), name="u8"))
    expect_error(ValueError, "not dense and contiguous",
                 lambda: bps.push_pull_async_inplace(torch.zeros(4, 4).t(), name="strided"))
    expect_error(ValueError, "its first push_pull had 60 bytes of float32",
                 lambda: bps.push_pull(torch.zeros(7), name="average"))  # 'average' has 15 floats
    expect_error(AssertionError, "specify a name", lambda: bps.push_pull(torch.zeros(2)))


def broadcasts(rank, size):
    root = size - 1  # not rank 0: broadcast must really take the root's values
    params = {"a": torch.full((300,), float(rank + 7)), "b": torch.arange(5, dtype=torch.int64) * (rank + 1)}
    bps.broadcast_parameters(params, root_rank=root)
    assert torch.equal(params["a"], torch.full((300,), float(root + 7))), params["a"][:3]
    assert torch.equal(params["b"], torch.arange(5, dtype=torch.int64) * (root + 1)), params["b"]
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(rank + 0.5)
    bps.broadcast_parameters(list(model.named_parameters()), root_rank=root)
    for name, p in model.named_parameters():
        assert torch.equal(p.data, torch.full_like(p, root + 0.5)), name

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.5 + 0.1 * rank)
    bps.broadcast_optimizer_state(optimizer, root_rank=root)
    group = optimizer.param_groups[0]
    assert abs(group["lr"] - 0.1 * (root + 1)) < 1e-12 and abs(group["momentum"] - (0.5 + 0.1 * root)) < 1e-12, group
    assert isinstance(group["nesterov"], bool) and group["nesterov"] is False


def distributed_optimizer(rank, size):
    # loss = sum(w * x) has gradient x: each rank's x is (rank + 1), so the averaged gradient is
    # (size + 1) / 2 and one SGD step of lr 0.1 moves w from 1 to 1 - 0.1 * (size + 1) / 2 everywhere.
    model = torch.nn.Linear(6, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    optimizer = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())
    for step in range(1, 4):
        optimizer.zero_grad()
        model(torch.full((1, 6), float(rank + 1))).sum().backward()
        optimizer.step()
        expected = 1.0 - step * 0.1 * (size + 1) / 2
        assert torch.allclose(model.weight.data, torch.full((1, 6), expected)), (step, model.weight.data)
    # Half-precision push_pull gives the same average for values float16 holds exactly.
    half = torch.nn.Linear(6, 1, bias=False)
    optimizer = bps.DistributedOptimizer(torch.optim.SGD(half.parameters(), lr=0.5),
                                         named_parameters=[("half." + n, p) for n, p in half.named_parameters()],
                                         compression=bps.Compression.fp16)
    with torch.no_grad():
        half.weight.fill_(1.0)
    optimizer.zero_grad()
    half(torch.full((1, 6), float(rank + 1))).sum().backward()
    optimizer.step()
    assert torch.allclose(half.weight.data, torch.full((1, 6), 1.0 - 0.5 * (size + 1) / 2)), half.weight.data
    # backward_passes_per_step=2: gradients of two passes accumulate locally before one push_pull.
    acc = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        acc.weight.fill_(0.0)
    optimizer = bps.DistributedOptimizer(torch.optim.SGD(acc.parameters(), lr=1.0),
                                         named_parameters=[("acc." + n, p) for n, p in acc.named_parameters()],
                                         backward_passes_per_step=2)
    optimizer.zero_grad()
    for _ in range(2):
        acc(torch.full((1, 2), float(rank + 1))).sum().backward()
    optimizer.step()
    assert torch.allclose(acc.weight.data, torch.full((1, 2), -2.0 * (size + 1) / 2)), acc.weight.data


def main():
    if os.environ.get("DMLC_ROLE") == "worker":
        init_refuses_bad_environment()
    bps.init()  # a server or the scheduler serves here and exits
    rank, size = bps.rank(), bps.size()
    assert size == int(os.environ["DMLC_NUM_WORKER"]) and 0 <= rank < size
    assert bps.local_rank() == 0 and bps.local_size() == 1
    sums_and_averages(rank, size)
    async_handles(rank, size)
    refusals(rank)
    broadcasts(rank, size)
    distributed_optimizer(rank, size)
    bps.shutdown()
    print(f"api_checks: rank {rank} of {size}: every check passed", flush=True)


if __name__ == "__main__":
    main()
