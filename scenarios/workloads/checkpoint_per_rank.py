"""DDP fine-tuning (of the last layer) that starts the model from a full training checkpoint on every rank.

The checkpoint holds the model weights, their EMA and the Adam moments (4x the model). Every rank does
``torch.load(path, map_location="cpu")``: each rank reads the whole file into its own
anonymous memory, N ranks at the same moment. ``--mmap`` uses
``torch.load(path, map_location="cpu", mmap=True)``: tensors stay backed by the page cache,
shared by the ranks, and only the model weights are ever read.

    torchrun --nproc-per-node 4 checkpoint_per_rank.py --resume CKPT [--mmap]
"""

import argparse
import os
import time

import torch


def build_model(mb=85, dim=1536):
    """A stack of Linear(dim, dim) layers holding about ``mb`` MiB of float32 weights."""
    layers = max(1, mb * (1 << 20) // (dim * dim * 4))
    return torch.nn.Sequential(*[torch.nn.Linear(dim, dim) for _ in range(layers)])


def main():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    p = argparse.ArgumentParser()
    p.add_argument("--resume", required=True)
    p.add_argument("--mmap", action="store_true")
    p.add_argument("--model-mb", type=int, default=85)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = build_model(args.model_mb)
    size_mb = os.path.getsize(args.resume) / 2**20
    print(f"[rank {rank}] resuming from {os.path.basename(args.resume)} ({size_mb:.0f} MB)", flush=True)
    t0 = time.time()
    checkpoint = torch.load(args.resume, map_location="cpu", mmap=args.mmap)
    model.load_state_dict(checkpoint["model"])
    print(f"[rank {rank}] loaded checkpoint step {checkpoint['step']} in {time.time() - t0:.1f}s", flush=True)

    for layer in model[:-1]:  # fine-tune the last layer only
        layer.requires_grad_(False)
    model = DDP(model)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    dim = model.module[0].in_features
    for step in range(args.steps):
        x = torch.randn(args.batch_size, dim)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"[rank {rank}] step {step} loss {loss.item():.4f}", flush=True)
    dist.barrier()
    if rank == 0:
        print(f"[rank {rank}] done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
