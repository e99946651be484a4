"""Train a small 3D segmentation net on random patches of CT volumes, with DataLoader workers.

    python train_ct_patches.py [--cases 160] [--epochs 3] [--num-workers 3] [--v2]

Each sample is a random 16 x 32 x 32 crop (with a random flip) of one of the cases; a case is
"decoded" here by synthesizing a 48 x 112 x 112 volume and its organ mask from the case id, a
stand-in for reading a NIfTI file and resampling it. Several patches are drawn from every case per
epoch, so ``CasePatches`` keeps the volumes it has read in a dict, ``self.volumes[case]``.
Logs with ``logging``.

What goes wrong (only said here): that dict has no bound, and every worker process has its own copy of
the Dataset: with persistent workers each of the 3 workers keeps every volume it has read (2.9 MiB
with its mask) until it has the whole set, ~460 MiB per worker. ``--v2`` keeps the 6 most recently
used volumes per worker (an OrderedDict used as an LRU).
"""

import argparse
import collections
import logging
import time
import zlib

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

VOL = (48, 112, 112)
PATCH = (16, 32, 32)

log = logging.getLogger("ct3d")


def read_case(case_id):
    """A stand-in for nibabel.load(...).get_fdata() and resampling: a smooth volume with an ellipsoid organ."""
    rng = np.random.default_rng(zlib.crc32(case_id.encode()))
    vol = rng.standard_normal(VOL, dtype=np.float32)
    vol = 0.5 * vol + 0.5 * np.roll(vol, 1, axis=2)
    zz, yy, xx = np.ogrid[: VOL[0], : VOL[1], : VOL[2]]
    c = rng.uniform(0.3, 0.7, size=3) * np.array(VOL)
    r = rng.uniform(0.15, 0.3, size=3) * np.array(VOL)
    mask = ((zz - c[0]) / r[0]) ** 2 + ((yy - c[1]) / r[1]) ** 2 + ((xx - c[2]) / r[2]) ** 2 < 1
    vol += 1.5 * mask
    return vol.astype(np.float32), mask.astype(np.uint8)


class CasePatches(Dataset):
    def __init__(self, cases, patches_per_case, keep=None):
        self.cases = cases
        self.per_case = patches_per_case
        self.keep = keep  # None: keep every volume read
        self.volumes = collections.OrderedDict()

    def __len__(self):
        return len(self.cases) * self.per_case

    def volume(self, case):
        if case in self.volumes:
            self.volumes.move_to_end(case)
            return self.volumes[case]
        item = read_case(case)
        self.volumes[case] = item
        if self.keep is not None and len(self.volumes) > self.keep:
            self.volumes.popitem(last=False)
        return item

    def __getitem__(self, idx):
        vol, mask = self.volume(self.cases[idx // self.per_case])
        rng = np.random.default_rng()
        z, y, x = (int(rng.integers(0, v - p + 1)) for v, p in zip(VOL, PATCH, strict=True))
        sl = np.s_[z : z + PATCH[0], y : y + PATCH[1], x : x + PATCH[2]]
        img, lab = vol[sl], mask[sl]
        if rng.random() < 0.5:
            img, lab = img[:, :, ::-1], lab[:, :, ::-1]
        return torch.from_numpy(img.copy())[None], torch.from_numpy(lab.astype(np.int64))


def seg_net(ch=8):
    return torch.nn.Sequential(
        torch.nn.Conv3d(1, ch, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv3d(ch, ch, 3, padding=1, stride=(1, 2, 2)),
        torch.nn.ReLU(),
        torch.nn.Conv3d(ch, ch, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Upsample(scale_factor=(1, 2, 2)),
        torch.nn.Conv3d(ch, 2, 1),
    )


def dice(logits, target):
    pred = logits.argmax(1)
    inter = ((pred == 1) & (target == 1)).sum().item()
    return 2 * inter / max(1, (pred == 1).sum().item() + (target == 1).sum().item())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", type=int, default=160)
    p.add_argument("--patches-per-case", type=int, default=8)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--num-workers", type=int, default=3, help="DataLoader workers")
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()
    logging.basicConfig(format="[%(asctime)s] %(levelname)s %(message)s", datefmt="%H:%M:%S", level=logging.INFO)

    cases = [f"case_{i:05d}" for i in range(args.cases)]
    ds = CasePatches(cases, args.patches_per_case, keep=6 if args.v2 else None)
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
        drop_last=True,
    )
    torch.manual_seed(0)
    net = seg_net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    weight = torch.tensor([0.3, 1.0])
    log.info("%d cases, %d patches per epoch, %d steps per epoch", len(cases), len(ds), len(loader))
    for epoch in range(args.epochs):
        t0, dices = time.time(), []
        for step, (img, lab) in enumerate(loader, 1):
            logits = net(img)
            loss = torch.nn.functional.cross_entropy(logits, lab, weight=weight)
            opt.zero_grad()
            loss.backward()
            opt.step()
            dices.append(dice(logits.detach(), lab))
            if step % 20 == 0:
                log.info(
                    "epoch %d step %d/%d loss %.4f dice %.3f",
                    epoch,
                    step,
                    len(loader),
                    loss.item(),
                    np.mean(dices[-20:]),
                )
        log.info("epoch %d finished in %.1fs, mean dice %.3f", epoch, time.time() - t0, np.mean(dices))


if __name__ == "__main__":
    main()
