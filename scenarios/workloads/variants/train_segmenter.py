"""Train a small binary segmentation net with 3 DataLoader workers; tqdm progress bars only.

    python train_segmenter.py --tiles 3000 --epochs 2 [--v2]

Tiles and their masks are "decoded" in the workers (synthesized from the tile name here, a stand-in
for reading a GeoTIFF and rasterizing its polygons). To share that work between the workers and
across epochs, decoded tiles go into a dict created with ``multiprocessing.Manager()``.

What goes wrong (only said here): a Manager dict lives in the manager's server process. Every tile
a worker decodes is pickled to it and stays there (208 KiB per tile), so the manager process grows
by the size of the decoded dataset until the kernel kills it; the workers then fail on their next
lookup. The fixed twin (``--v2``) decodes in the workers and shares nothing.
"""

import argparse
import multiprocessing as mp
import zlib

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm


def decode_tile(name, size=128):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    img = rng.integers(0, 256, size=(3, size, size), dtype=np.uint8).astype(np.float32) / 255.0
    yy, xx = np.mgrid[:size, :size]
    cy, cx, r = rng.integers(16, size - 16, size=3)
    mask = ((yy - cy) ** 2 + (xx - cx) ** 2 < r**2).astype(np.uint8)
    return img, mask


class Tiles(Dataset):
    def __init__(self, names, shared=None):
        self.names, self.shared = names, shared

    def __len__(self):
        return len(self.names)

    def __getitem__(self, i):
        name = self.names[i]
        if self.shared is None:
            img, mask = decode_tile(name)
        elif name in self.shared:
            img, mask = self.shared[name]
        else:
            img, mask = decode_tile(name)
            self.shared[name] = (img, mask)
        return torch.from_numpy(img), torch.from_numpy(mask).float()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tiles", type=int, default=3000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    names = [f"tiles/z14/{i % 60:02d}/{i:06d}.tif" for i in range(args.tiles)]
    shared = None if args.v2 else mp.Manager().dict()
    loader = DataLoader(Tiles(names, shared), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 4, stride=4),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.ConvTranspose2d(16, 1, 4, stride=4),
    )
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        bar = tqdm(loader, desc=f"epoch {epoch + 1}/{args.epochs}")
        for img, mask in bar:
            logits = net(img)[:, 0]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, mask)
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar.set_postfix(bce=f"{loss.item():.3f}")


if __name__ == "__main__":
    main()
