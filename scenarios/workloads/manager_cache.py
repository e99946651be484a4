"""Training with the common ``CachedDataset`` wrapper: a ``multiprocessing.Manager().dict()``
shared by all DataLoader workers, so that a sample decoded by one worker is reused by all.

Every cached sample is pickled to the manager's server process and kept there, so the
manager grows by the size of the decoded dataset until the memory limit is hit and the
kernel kills it; the workers' next cache lookup then fails with BrokenPipeError /
ConnectionResetError / EOFError. ``--no-cache`` decodes in the workers and relies on the
page cache, as the fix suggests.

    python manager_cache.py --num-workers 4 [--no-cache]
"""

import argparse
import multiprocessing

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class DecodedImages(Dataset):
    def __init__(self, n, size):
        self.n, self.size = n, size

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        rng = np.random.default_rng(idx)
        raw = rng.integers(0, 256, size=(3, self.size, self.size), dtype=np.uint8)  # "decode"
        return raw.astype(np.float32) / 255.0, idx % 10


class CachedDataset(Dataset):
    """Cache decoded samples in a Manager dict shared between the DataLoader workers."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.manager = multiprocessing.Manager()
        self.cache = self.manager.dict()

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, idx):
        if idx not in self.cache:
            self.cache[idx] = self.dataset[idx]
        return self.cache[idx]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--num-samples", type=int, default=5000)
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--num-workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    args = p.parse_args()

    ds = DecodedImages(args.num_samples, args.image_size)
    if not args.no_cache:
        ds = CachedDataset(ds)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 5, stride=4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers)
    print(f"{len(loader)} batches per epoch", flush=True)
    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 20 == 0:
                print(f"epoch {epoch} step {step}/{len(loader)} loss {loss.item():.4f}", flush=True)
        print(f"epoch {epoch} done: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
