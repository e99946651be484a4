"""A small real DDP job on CPU for the agent's tests: gloo, a DataLoader with 2 workers per rank.

Each rank writes ``<outdir>/rank<N>.ready`` with its pid and its workers' pids once the workers run,
then trains slowly until ``<outdir>/stop`` exists (or 120 s pass); the ranks agree on the step they stop at."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.01)
        return torch.full((64,), float(i % 7))


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Slow(), batch_size=8, num_workers=2, persistent_workers=True)
    deadline = time.monotonic() + 120
    announced = False
    for batch in loader:
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if not announced:
            workers = [p.pid for p in loader._iterator._workers]  # type: ignore[union-attr]
            (out / f"rank{rank}.ready").write_text(" ".join(map(str, [os.getpid(), *workers])))
            announced = True
        # the ranks stop together: one that saw the stop file a step before the other would leave it waiting in
        # its next all-reduce for a peer that is gone (gloo: "Connection closed by peer", the job exits 1)
        stop = torch.tensor([float((out / "stop").exists() or time.monotonic() > deadline)])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item() > 0:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
