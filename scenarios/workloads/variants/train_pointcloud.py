"""PointNet-style shape classification, DDP with torchrun (2 ranks, 2 DataLoader workers each).

    torchrun --nproc-per-node 2 train_pointcloud.py --shapes 3000 [--v2]

Scans are "loaded" in the workers (synthesized from the scan id here, a stand-in for reading a PLY
file and normalizing it to the unit sphere), then 1024 points are sampled for the network. To skip
the normalization after the first epoch, each rank keeps the loaded scans in a dict shared by its
workers, made with ``multiprocessing.Manager()``. Logging: ``logging`` on rank 0.

What goes wrong (only said here): each rank's Manager dict lives in a manager server process forked
from the rank. Every scan a worker loads (16,384 points x 4 float32, 256 KiB) is pickled to it and
stays there: both managers grow by the size of their half of the dataset until one is killed. The
fixed twin (``--v2``) loads in the workers every time.
"""

import argparse
import logging
import multiprocessing as mp

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

logging.basicConfig(format="%(asctime)s [%(levelname)s] %(message)s", level=logging.INFO)
log = logging.getLogger(__name__)


def load_scan(i, n=16384):
    rng = np.random.default_rng(i)
    pts = rng.standard_normal((n, 3)).astype(np.float32) * rng.uniform(0.5, 2.0, size=3).astype(np.float32)
    pts /= np.linalg.norm(pts, axis=1).max()
    return np.concatenate([pts, rng.random((n, 1), dtype=np.float32)], axis=1)


class Scans(Dataset):
    def __init__(self, n, loaded=None, points=1024):
        self.n, self.loaded, self.points = n, loaded, points

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.loaded is None:
            scan = load_scan(i)
        else:
            scan = self.loaded.get(i)
            if scan is None:
                scan = load_scan(i)
                self.loaded[i] = scan
        pick = np.random.default_rng().choice(len(scan), self.points, replace=False)
        return torch.from_numpy(scan[pick]), i % 10


class PointNet(torch.nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 64))
        self.head = torch.nn.Linear(64, classes)

    def forward(self, pts):
        return self.head(self.mlp(pts).max(dim=1).values)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", type=int, default=3000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loaded = None if args.v2 else mp.Manager().dict()
    ds = Scans(args.shapes, loaded)
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=2)
    torch.manual_seed(0)
    model = DDP(PointNet())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for step, (pts, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(pts), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rank == 0 and step % 20 == 0:
                log.info("epoch %d step %d/%d loss %.4f", epoch, step, len(loader), loss.item())
    if rank == 0:
        log.info("training done")
    dist.barrier()  # every rank done before the group goes (gloo can abort a rank torn down first)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
