"""A tiny CPU DDP (gloo) training loop for launcher captures.

Launch with torchrun / python -m torch.distributed.launch (reads RANK etc. from the
environment), or run directly with --spawn N to use torch.multiprocessing.spawn.

--mode healthy   train a few steps; rank 0 prints loss lines and a tqdm progress bar
--mode oom       rank --bad-rank grows host memory by 32 MiB per step until killed
--mode raise     rank --bad-rank raises ValueError at step 3
--mode segfault  rank --bad-rank dereferences NULL via ctypes at step 3 (SIGSEGV)
"""

import argparse
import ctypes
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

GROW = 32 * 1024 * 1024


def train(rank, world_size, args):
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    hoard = []
    steps = range(args.steps)
    if args.mode == "healthy" and rank == 0:
        from tqdm import tqdm

        steps = tqdm(steps, desc="train", mininterval=0)
    for step in steps:
        x = torch.randn(8, 16, generator=g)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == args.bad_rank and step >= 3:
            if args.mode == "oom":
                hoard.append(bytearray(b"\x01") * GROW)  # e.g. keeping every batch's outputs
            elif args.mode == "raise":
                raise ValueError(f"bad sample at step {step}: label out of range")
            elif args.mode == "segfault":
                ctypes.string_at(0)
        if rank == 0 and step % 5 == 0:
            msg = f"[rank {rank}] step {step} loss {loss.item():.4f}"
            if args.mode == "healthy":
                steps.write(msg)
            else:
                print(msg, flush=True)
        time.sleep(args.sleep)
    if rank == 0:
        print(f"[rank {rank}] done: final loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["healthy", "oom", "raise", "segfault"], default="healthy")
    p.add_argument("--bad-rank", type=int, default=1)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--sleep", type=float, default=0.02)
    p.add_argument("--spawn", type=int, default=0, help="use torch.multiprocessing.spawn")
    p.add_argument("--port", type=int, default=29531)
    p.add_argument("--local-rank", "--local_rank", type=int, default=None)  # launch.py passes it
    args = p.parse_args()
    if args.spawn:
        import torch.multiprocessing as mp

        mp.spawn(train, args=(args.spawn, args), nprocs=args.spawn)
    else:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)


if __name__ == "__main__":
    main()
