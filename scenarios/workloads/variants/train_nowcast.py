"""Precipitation nowcasting: predict the next 2 radar frames from the last 6, with DataLoader workers.

    python train_nowcast.py [--sequences 3000] [--epochs 2] [--num-workers 3] [--v2]

A sample is 8 consecutive 80 x 80 radar reflectivity frames, "decoded" here from the sequence's key
(a stand-in for reading and unpacking a zlib-compressed composite): a few moving rain cells plus
noise. Decoding is slow-ish, so the decoded sequences are put into a store that all workers share
and that survives between epochs, ``multiprocessing.Manager().dict()``. tqdm bars only.

What goes wrong (only said here): the Manager's dict lives in the manager's server process. Every
sequence a worker decodes is pickled to it and stays there (200 KiB each), so the manager grows by
the size of the decoded dataset (~600 MiB) until the kernel kills it, and the workers then fail on
their next lookup. ``--v2`` decodes in the workers and shares nothing.
"""

import argparse
import multiprocessing as mp
import zlib

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

FRAMES, H, W = 8, 80, 80


def decode_sequence(key):
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    yy, xx = np.mgrid[:H, :W].astype(np.float32)
    seq = rng.gamma(1.0, 0.05, size=(FRAMES, H, W)).astype(np.float32)
    for _ in range(int(rng.integers(2, 6))):
        cy, cx = rng.uniform(0, H), rng.uniform(0, W)
        vy, vx = rng.normal(0, 1.5, size=2)
        r, amp = rng.uniform(4, 14), rng.uniform(0.5, 2.0)
        for t in range(FRAMES):
            d2 = (yy - cy - vy * t) ** 2 + (xx - cx - vx * t) ** 2
            seq[t] += amp * np.exp(-d2 / (2 * r * r))
    return seq


class RadarSequences(Dataset):
    def __init__(self, keys, store=None):
        self.keys, self.store = keys, store

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        key = self.keys[i]
        if self.store is None:
            seq = decode_sequence(key)
        else:
            seq = self.store.get(key)
            if seq is None:
                seq = decode_sequence(key)
                self.store[key] = seq
        seq = torch.from_numpy(seq)
        return seq[:6], seq[6:]


def nowcast_net(ch=16):
    return torch.nn.Sequential(
        torch.nn.Conv2d(6, ch, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(ch, ch, 3, padding=2, dilation=2),
        torch.nn.ReLU(),
        torch.nn.Conv2d(ch, 2, 3, padding=1),
    )


def main():
    p = argparse.ArgumentParser(description="radar nowcasting")
    p.add_argument("--sequences", type=int, default=3000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--num-workers", type=int, default=3, help="DataLoader workers")
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    keys = [f"radar/{2024 + i // 1000}/{i % 366:03d}/seq_{i:06d}.npz.zst" for i in range(args.sequences)]
    store = None if args.v2 else mp.Manager().dict()
    loader = DataLoader(
        RadarSequences(keys, store), batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers
    )
    torch.manual_seed(0)
    net = nowcast_net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        bar = tqdm(loader, desc=f"Epoch {epoch + 1}/{args.epochs}", mininterval=1.0)
        for past, future in bar:
            loss = torch.nn.functional.mse_loss(net(past), future)
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar.set_postfix(mse=f"{loss.item():.4f}", refresh=False)


if __name__ == "__main__":
    main()
