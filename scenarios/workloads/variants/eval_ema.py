"""Evaluate the EMA weights of a training checkpoint on 3 processes (torch.multiprocessing.spawn, gloo).

The checkpoint is what the training loop saves (``{"model", "ema", "optimizer", "step"}``); each
process scores a third of the evaluation batches and the losses are all-reduced.

    python eval_ema.py --ckpt CKPT [--v2]

What goes wrong (only said here): every process calls ``torch.load(ckpt, map_location="cpu")``
and so holds a private copy of the whole checkpoint (weights, EMA and both Adam moments: 4x the
model) at the same moment, to use only the EMA weights (the checkpoint stays referenced in ``worker``
while it evaluates). The fixed twin (``--v2``) loads it in
process 0 only and broadcasts the EMA weights to the others with ``dist.broadcast``.
"""

import argparse
import logging
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

log = logging.getLogger("eval_ema")


def build_model(layers, dim=1536):
    return torch.nn.Sequential(*[torch.nn.Linear(dim, dim) for _ in range(layers)])


def load_ema(model, args, rank):
    if not args.v2:
        ckpt = torch.load(args.ckpt, map_location="cpu")
        model.load_state_dict(ckpt["ema"])
        return ckpt
    step = torch.zeros(1, dtype=torch.long)
    if rank == 0:
        ckpt = torch.load(args.ckpt, map_location="cpu")
        model.load_state_dict(ckpt["ema"])
        step += ckpt["step"]
        del ckpt
    for t in model.state_dict().values():
        dist.broadcast(t, src=0)
    dist.broadcast(step, src=0)
    return {"step": int(step)}


def worker(rank, world, args):
    logging.basicConfig(format="%(asctime)s %(levelname)s [rank %(rank)s] %(message)s", level=logging.INFO)
    log_ = logging.LoggerAdapter(log, {"rank": rank})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = build_model(args.layers).eval()
    ckpt = load_ema(model, args, rank)
    log_.info("loaded EMA weights from step %d", ckpt["step"])

    g = torch.Generator().manual_seed(0)
    total = torch.zeros(2)
    with torch.no_grad():
        for i in range(args.batches):
            x = torch.randn(args.batch_size, 1536, generator=g)
            if i % world != rank:
                continue
            total += torch.tensor([torch.nn.functional.mse_loss(model(x), x).item(), 1.0])
    dist.all_reduce(total)
    if rank == 0:
        log_.info("eval mse %.5f over %d batches", total[0] / total[1], int(total[1]))
    dist.barrier()  # every rank done before the group goes (gloo can abort a rank torn down first)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True)
    p.add_argument("--layers", type=int, default=7)
    p.add_argument("--world-size", type=int, default=3)
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    mp.spawn(worker, args=(args.world_size, args), nprocs=args.world_size)


if __name__ == "__main__":
    main()
