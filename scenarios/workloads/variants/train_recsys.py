"""Next-item recommendation over a 10k-item catalogue, DDP with torch.multiprocessing.spawn (2 processes).

    python train_recsys.py --steps 150 [--v2]

Each process trains on its own synthetic sessions; the epoch-end metric (hit rate@10) is computed
from the predictions collected during the epoch. Logs with ``logging``, including the peak RSS
from ``resource.getrusage``.

What goes wrong (only said here): every step appends the full softmax over the catalogue,
``all_preds.append(logits.softmax(-1).detach())`` (64 x 10,000 float32, 2.4 MiB), to compute the
metric at the end: ``detach()`` drops the graph but keeps the tensor, so both processes grow by
2.4 MiB a step until one is killed. The fixed twin (``--v2``) computes each step's hit rate
and keeps that Python float.
"""

import argparse
import logging
import os
import resource

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

ITEMS = 10_000


def max_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class NextItem(torch.nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.history = torch.nn.EmbeddingBag(ITEMS, dim, mode="mean")
        self.out = torch.nn.Linear(dim, ITEMS)

    def forward(self, hist):
        return self.out(self.history(hist))


def run(rank, world, args):
    logging.basicConfig(format=f"%(asctime)s rank{rank} %(levelname)s %(message)s", level=logging.INFO)
    log = logging.getLogger("recsys")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DDP(NextItem())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    all_preds, all_targets, hits = [], [], []
    for step in range(args.steps):
        hist = torch.randint(0, ITEMS, (args.batch_size, 20), generator=g)
        target = hist[:, -1].roll(1)
        logits = model(hist)
        loss = torch.nn.functional.cross_entropy(logits, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.v2:
            hits.append((logits.topk(10, dim=-1).indices == target[:, None]).any(1).float().mean().item())
        else:
            all_preds.append(logits.softmax(-1).detach())
            all_targets.append(target)
        if step % 20 == 0:
            log.info("step %d loss %.4f max rss %.0f MB", step, loss.item(), max_rss_mb())
    if args.v2:
        hit_rate = sum(hits) / len(hits)
    else:
        top10 = torch.cat(all_preds).topk(10, dim=-1).indices
        hit_rate = (top10 == torch.cat(all_targets)[:, None]).any(1).float().mean().item()
    log.info("hit@10 %.4f", hit_rate)
    dist.barrier()  # every rank done before the group goes (gloo can abort a rank torn down first)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--nprocs", type=int, default=2)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29541")
    mp.spawn(run, args=(args.nprocs, args), nprocs=args.nprocs, join=True)


if __name__ == "__main__":
    main()
