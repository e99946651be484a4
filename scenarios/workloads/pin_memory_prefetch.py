"""Image training with a DataLoader tuned "for throughput": many workers, a large
``prefetch_factor`` and ``pin_memory=True`` with large batches.

Up to ``num_workers * prefetch_factor`` batches are in flight at once, each held in shared
memory (and, with CUDA, copied again into page-locked host memory by the pin-memory
thread). When the training step is slower than the workers, all of them fill up: here
4 x 16 batches of 32 x 3 x 224 x 224 float32 (18 MiB each). ``--prefetch-factor 2`` keeps 8.

    python pin_memory_prefetch.py --num-workers 4 --prefetch-factor 16 --pin-memory
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class RandomImages(Dataset):
    def __init__(self, n, size):
        self.n, self.size = n, size

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(idx)
        return torch.rand(3, self.size, self.size, generator=g), idx % 10


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--num-samples", type=int, default=32 * 60)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-workers", type=int, default=4)
    p.add_argument("--prefetch-factor", type=int, default=16)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--step-time", type=float, default=0.1, help="seconds of 'GPU' work per step")
    args = p.parse_args()

    ds = RandomImages(args.num_samples, args.image_size)
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        prefetch_factor=args.prefetch_factor,
        pin_memory=args.pin_memory,
        persistent_workers=False,
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 7, stride=8),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_time)  # the rest of the (GPU) step
        if step % 10 == 0:
            print(f"step {step}/{len(loader)} loss {loss.item():.4f}", flush=True)
    print(f"epoch done: loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
