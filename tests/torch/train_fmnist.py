#!/usr/bin/env python3
"""A BytePS PyTorch training script (Fashion-MNIST, a small MLP, CPU) whose only change from
byteps.torch is its import line. Every process of the job runs it: bps.init() serves the server and
scheduler roles; the workers train, each on its own share of every global batch.

  --local  trains the same model in this one process, without BytePS, on the whole global batch
           (batch size x workers): what the job must match.
Prints `accuracy=A samples=N` (rank 0, or the local run) with A the test-set accuracy.
"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--data", default=os.environ.get("PSTWIN_FASHION_MNIST", "/usr/share/datasets/fashion-mnist"))
parser.add_argument("--batch-size", type=int, default=32, help="per worker")
parser.add_argument("--iterations", type=int, default=300)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--fp16-pushpull", action="store_true")
parser.add_argument("--local", action="store_true")
parser.add_argument("--workers", type=int, default=2, help="with --local: the job's workers to match")
args = parser.parse_args()

if not args.local:
    import pstwin.torch as bps

    bps.init()

torch.set_num_threads(1)
torch.manual_seed(args.seed)


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(split):
    images = read_idx(os.path.join(args.data, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(args.data, f"{split}-labels-idx1-ubyte.gz"))
    return torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0), \
        torch.from_numpy(labels.astype(np.int64))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 64)
        self.fc3 = nn.Linear(64, 10)

    def forward(self, x):
        return F.log_softmax(self.fc3(F.relu(self.fc2(F.relu(self.fc1(x))))), dim=1)


train_x, train_y = load("train")
test_x, test_y = load("t10k")
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

if args.local:
    workers, rank = args.workers, 0
    per_step = args.batch_size * workers
else:
    workers, rank = bps.size(), bps.rank()
    per_step = args.batch_size * workers
    bps.broadcast_parameters(model.state_dict(), root_rank=0)
    bps.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = bps.Compression.fp16 if args.fp16_pushpull else bps.Compression.none
    optimizer = bps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

# One order of the training set for everyone: global batch t is order[t * per_step : (t + 1) * per_step],
# and worker r trains on its r-th share.
order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(args.seed))
model.train()
for step in range(args.iterations):
    start = (step * per_step) % (len(order) - per_step)
    batch = order[start:start + per_step]
    if not args.local:
        batch = batch[rank * args.batch_size:(rank + 1) * args.batch_size]
    optimizer.zero_grad()
    loss = F.nll_loss(model(train_x[batch]), train_y[batch])
    loss.backward()
    optimizer.step()

if rank == 0:
    model.eval()
    with torch.no_grad():
        accuracy = (model(test_x).argmax(dim=1) == test_y).float().mean().item()
    print(f"accuracy={accuracy:.4f} samples={args.iterations * per_step} loss={loss.item():.4f}", flush=True)
