"""DDP pre-training on a tokenized Arrow dataset saved with ``Dataset.save_to_disk``.

Every rank calls ``datasets.load_from_disk(path, keep_in_memory=...)``. With
``--keep-in-memory`` each rank copies the whole Arrow table into its own anonymous memory
(N ranks, N copies); without it the table stays memory-mapped and the page cache holds one
shared copy.

    torchrun --nproc-per-node 4 keep_in_memory.py --dataset-path DIR [--keep-in-memory]
"""

import argparse
import time

import datasets
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

VOCAB = 1024


class TinyLM(torch.nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.emb = torch.nn.EmbeddingBag(VOCAB, dim, mode="mean")
        self.head = torch.nn.Linear(dim, 2)

    def forward(self, ids):
        return self.head(self.emb(ids))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dataset-path", required=True)
    p.add_argument("--keep-in-memory", action="store_true")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.05)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"[rank {rank}] loading dataset", flush=True)
    t0 = time.time()
    ds = datasets.load_from_disk(args.dataset_path, keep_in_memory=args.keep_in_memory)
    ds = ds.with_format("torch")
    print(f"[rank {rank}] {ds.num_rows} rows in {time.time() - t0:.1f}s", flush=True)
    if rank == 0:
        print(ds, flush=True)

    torch.manual_seed(0)
    model = DDP(TinyLM())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    shard = range(rank, ds.num_rows, world)
    for step in range(args.steps):
        idx = [shard[(step * args.batch_size + k) % len(shard)] for k in range(args.batch_size)]
        batch = ds[idx]
        ids = batch["input_ids"].long() % VOCAB
        loss = torch.nn.functional.cross_entropy(model(ids), batch["label"].long())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 5 == 0:
            print(f"[rank {rank}] step {step} loss {loss.item():.4f}", flush=True)
    dist.barrier()
    if rank == 0:
        print(f"[rank {rank}] done: {args.steps} steps, final loss {loss.item():.4f}", flush=True)
    dist.barrier()  # every rank done before the group goes (gloo can abort a rank torn down first)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
