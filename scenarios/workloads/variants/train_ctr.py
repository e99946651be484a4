"""Click-through model with a row-sharded embedding table (each rank owns a slice of the rows and
trains it with SparseAdam; the dense tower is replicated with DDP), 2 ranks.

    python -m torch.distributed.run --standalone --nproc_per_node=2 train_ctr.py [--v2]

Samples are routed to the rank owning their id (synthetic click logs here). A tqdm bar on rank 0
only; at the end the model is checkpointed.

What goes wrong (only said here): the checkpoint is consolidated on rank 0 the way a single-process
``state_dict()`` would look: for the table and for its Adam moments, rank 0 ``dist.gather``s
every rank's slice into a list and ``torch.cat``s it. Rank 0 ends up holding the full table
(117 MiB), the full optimizer state (2 x 117 MiB) and, while concatenating, the gathered slices again, on top of
its own shard; the other rank only sends. The fixed twin (``--v2``) writes one file per rank with
its own slice (``shard-00.pt``, ``shard-01.pt``).
"""

import argparse
import os
import tempfile

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm


def gather_full(t, rank, world):
    parts = [torch.empty_like(t) for _ in range(world)] if rank == 0 else None
    dist.gather(t.contiguous(), parts, dst=0)
    return torch.cat(parts) if rank == 0 else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=480_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--out-dir", default=os.path.join(tempfile.gettempdir(), "ctr-ckpt"))
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rows = args.rows // world
    torch.manual_seed(rank)
    table = torch.nn.Embedding(local_rows, args.dim, sparse=True)
    tower = DDP(torch.nn.Sequential(torch.nn.Linear(args.dim, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    opt_sparse = torch.optim.SparseAdam(table.parameters(), lr=1e-3)
    opt_dense = torch.optim.Adam(tower.parameters(), lr=1e-3)

    g = torch.Generator().manual_seed(100 + rank)
    for _ in tqdm(range(args.steps), disable=rank != 0, desc="train"):
        ids = torch.randint(0, local_rows, (args.batch_size,), generator=g)
        clicks = (ids % 7 == 0).float()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(tower(table(ids))[:, 0], clicks)
        opt_sparse.zero_grad()
        opt_dense.zero_grad()
        loss.backward()
        opt_sparse.step()
        opt_dense.step()

    os.makedirs(args.out_dir, exist_ok=True)
    state = opt_sparse.state[table.weight]
    if args.v2:
        shard = {"rows": (rank * local_rows, (rank + 1) * local_rows), "weight": table.weight.data}
        shard.update(exp_avg=state["exp_avg"], exp_avg_sq=state["exp_avg_sq"])
        path = os.path.join(args.out_dir, f"shard-{rank:02d}.pt")
        torch.save({"shard": shard, "tower": tower.module.state_dict()}, path)
    else:
        full = {"table.weight": gather_full(table.weight.data, rank, world)}
        for key in ("exp_avg", "exp_avg_sq"):
            full[f"table.{key}"] = gather_full(state[key], rank, world)
        if rank == 0:
            full.update({f"tower.{k}": v for k, v in tower.module.state_dict().items()})
            torch.save(full, os.path.join(args.out_dir, "model.pt"))
    dist.barrier()
    if rank == 0:
        print(f"saved checkpoint to {args.out_dir}")
    dist.barrier()  # every rank done before the group goes (gloo can abort a rank torn down first)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
