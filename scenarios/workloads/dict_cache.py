"""Image-classification training whose Dataset caches every decoded sample in a dict.

``__getitem__`` decodes a compressed sample (here: uint8 -> normalized float32 CHW) and, to
"speed up later epochs", stores the result in ``self.cache[idx]``. Each DataLoader worker has
its own copy of the Dataset, so each worker's cache grows without bound until the memory
limit is hit and the kernel kills a worker. ``--cache lru`` bounds it with
``functools.lru_cache(maxsize=...)``; ``--cache none`` decodes every time.

    python dict_cache.py --num-workers 4 [--cache dict|lru|none]
"""

import argparse
import functools

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

MEAN, STD = 114.0, 58.0


class ImageFolderLike(Dataset):
    def __init__(self, n, size, cache, cache_size):
        self.n, self.size = n, size
        self.cache_kind = cache
        self.cache = {}
        if cache == "lru":
            self.load = functools.lru_cache(maxsize=cache_size)(self.decode)
        else:
            self.load = self.decode

    def __len__(self):
        return self.n

    def decode(self, idx):
        rng = np.random.default_rng(idx)
        raw = rng.integers(0, 256, size=(self.size, self.size, 3), dtype=np.uint8)  # "JPEG decode"
        return torch.from_numpy(((raw.astype(np.float32) - MEAN) / STD).transpose(2, 0, 1).copy())

    def __getitem__(self, idx):
        if self.cache_kind == "dict":
            if idx not in self.cache:
                self.cache[idx] = self.decode(idx)
            img = self.cache[idx]
        else:
            img = self.load(idx)
        return img, idx % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--num-samples", type=int, default=7000)
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--cache", choices=["dict", "lru", "none"], default="dict")
    p.add_argument("--cache-size", type=int, default=64, help="lru_cache maxsize")
    p.add_argument("--num-workers", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    args = p.parse_args()

    ds = ImageFolderLike(args.num_samples, args.image_size, args.cache, args.cache_size)
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
