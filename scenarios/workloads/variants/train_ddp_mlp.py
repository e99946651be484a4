"""A plain DDP training job with torchrun: an MLP classifier on synthetic features (2 ranks, gloo).

    torchrun --nproc-per-node 2 train_ddp_mlp.py --steps 150

Healthy on its own: each rank stays at a few hundred MiB. Used where something else in the same
job (another program started from the same shell) takes the memory.
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--features", type=int, default=128)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(
        torch.nn.Sequential(
            torch.nn.Linear(args.features, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 10),
        )
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(rank)
    w = torch.randn(args.features, 10, generator=torch.Generator().manual_seed(0))
    for step in range(args.steps):
        x = torch.randn(args.batch_size, args.features, generator=g)
        y = (x @ w).argmax(1)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 25 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}", flush=True)
    if rank == 0:
        print("finished", flush=True)
    dist.barrier()  # both ranks done before the group goes (gloo may abort a rank torn down mid-collective)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
