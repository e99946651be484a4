"""Training from an in-memory index held as a list of Python objects, with DataLoader workers.

The Dataset keeps one ``(path, label, weight)`` tuple per sample in a Python list (as when an
index file or a JSON manifest is read into memory). DataLoader workers are forked: they
start by sharing the parent's pages copy-on-write, but every ``self.samples[i]`` access
writes the reference counts of the tuple and its items, so each page a worker touches is
copied into that worker (and the parent's garbage collector copies the pages it traverses).
Over a shuffled epoch each worker ends up with its own copy of (nearly) the whole list: USS
grows towards the parent's size while RSS stays flat. ``--storage numpy`` keeps the same
index in numpy arrays (no per-sample objects to refcount).

    python cow_refcount.py --num-samples 1000000 --num-workers 4 [--storage numpy]
"""

import argparse
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def sample_path(i):
    return f"/data/train/{i // 1000:04d}/{i:08d}.jpg"


class ListIndex(Dataset):
    """The index as Python objects: a list of (path, label, weight) tuples."""

    def __init__(self, n):
        self.samples = [(sample_path(i), 1000 + i % 1000, 1.0 + i * 1e-7) for i in range(n)]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label, weight = self.samples[i]
        return path, label, weight


class ArrayIndex(Dataset):
    """The same index in numpy arrays: no per-sample Python objects to refcount."""

    def __init__(self, n):
        self.paths = np.array([sample_path(i) for i in range(n)], dtype="S32")
        i = np.arange(n)
        self.labels = 1000 + i % 1000
        self.weights = 1.0 + i * 1e-7

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.paths[i].decode(), int(self.labels[i]), float(self.weights[i])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--num-samples", type=int, default=1_000_000)
    p.add_argument("--storage", choices=["list", "numpy"], default="list")
    p.add_argument("--num-workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=1)
    args = p.parse_args()

    t0 = time.time()
    ds = ListIndex(args.num_samples) if args.storage == "list" else ArrayIndex(args.num_samples)
    print(f"index: {len(ds)} samples ({time.time() - t0:.1f}s)", flush=True)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(2000, 16), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers)
    for epoch in range(args.epochs):
        for step, (paths, label, weight) in enumerate(loader):
            target = label % 2
            loss = (torch.nn.functional.cross_entropy(model(label), target, reduction="none") * weight.float()).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 100 == 0:
                print(f"epoch {epoch} step {step}/{len(loader)} loss {loss.item():.4f} ({paths[0]})", flush=True)
        print(f"epoch {epoch} done: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
