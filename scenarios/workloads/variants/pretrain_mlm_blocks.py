"""Masked-LM pretraining of a tiny transformer encoder on a pre-tokenized corpus, under torchrun.

    torchrun --nproc-per-node 2 pretrain_mlm_blocks.py --data DATASET_DIR [--v2]

The corpus was tokenized once and saved with ``save_to_disk`` (rows of 512 token ids). As in the HF
``run_mlm.py`` example, the rows are cut into 128-token blocks with
``Dataset.map(group_texts, batched=True)`` and the masking is done by the collator. Rank 0 prints a
loss line every 20 steps.

What goes wrong (only said here): the map is run with ``keep_in_memory=True`` (the dataset folder is
read-only on the cluster and the user did not want cache files next to it). ``map`` then writes its
result into an in-memory Arrow buffer: each rank builds the whole grouped table (input_ids int32 +
attention_mask int8, ~500 MiB) in its own anonymous memory, both at the same moment. ``--v2`` cuts the
blocks on the fly from the memory-mapped dataset in ``__getitem__``: both ranks read the same pages of
the page cache.
"""

import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from datasets import load_from_disk
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

BLOCK = 128
VOCAB = 32000
MASK_ID = 4


def group_texts(batch, block=BLOCK):
    ids = np.asarray(batch["input_ids"], dtype=np.int32)
    usable = ids.shape[1] // block * block
    blocks = ids[:, :usable].reshape(-1, block)
    return {"input_ids": blocks, "attention_mask": np.ones_like(blocks, dtype=np.int8)}


class OnTheFlyBlocks(torch.utils.data.Dataset):
    """The same 128-token blocks, cut from the memory-mapped rows when asked for."""

    def __init__(self, ds, block=BLOCK, row_len=512):
        self.ds, self.block, self.per_row = ds, block, row_len // block

    def __len__(self):
        return len(self.ds) * self.per_row

    def __getitem__(self, j):
        row = self.ds[j // self.per_row]["input_ids"]
        k = (j % self.per_row) * self.block
        ids = row[k : k + self.block]
        return {"input_ids": ids, "attention_mask": np.ones_like(ids, dtype=np.int8)}


def mlm_collate(rows, prob=0.15):
    ids = torch.from_numpy(np.stack([np.asarray(r["input_ids"]) for r in rows])).long()
    labels = ids.clone()
    masked = torch.rand(ids.shape) < prob
    labels[~masked] = -100
    inputs = ids.masked_fill(masked & (torch.rand(ids.shape) < 0.8), MASK_ID)
    return inputs, labels


class TinyEncoder(torch.nn.Module):
    def __init__(self, dim=64, layers=2):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, dim)
        self.pos = torch.nn.Embedding(BLOCK, dim)
        layer = torch.nn.TransformerEncoderLayer(dim, 2, 4 * dim, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(dim)
        torch.nn.init.normal_(self.tok.weight, std=0.02)
        torch.nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, inputs, labels):
        h = self.enc(self.tok(inputs) + self.pos.weight[: inputs.shape[1]])
        sel = labels != -100
        logits = F.linear(self.norm(h[sel]), self.tok.weight)
        return F.cross_entropy(logits, labels[sel])


def main():
    p = argparse.ArgumentParser(description="MLM pretraining on a tokenized corpus")
    p.add_argument("--data", required=True, help="directory written by Dataset.save_to_disk")
    p.add_argument("--max-steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--v2", action="store_true", help="new data pipeline")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t0 = time.time()
    raw = load_from_disk(args.data).with_format("numpy")
    if args.v2:
        train = OnTheFlyBlocks(raw)
    else:
        train = raw.map(
            group_texts,
            batched=True,
            batch_size=2000,
            remove_columns=raw.column_names,
            keep_in_memory=True,
            desc="Grouping texts in chunks of 128" if rank == 0 else None,
        ).with_format("numpy")
    if rank == 0:
        print(f"{len(train)} blocks of {BLOCK} tokens ({time.time() - t0:.1f}s)", flush=True)

    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler, collate_fn=mlm_collate)
    torch.manual_seed(0)
    model = DDP(TinyEncoder())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    step, t0, running = 0, time.time(), 0.0
    while step < args.max_steps:
        for inputs, labels in loader:
            loss = model(inputs, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.item()
            step += 1
            if rank == 0 and step % 20 == 0:
                print(
                    f"step {step:>4}/{args.max_steps} | mlm loss {running / 20:.4f} | "
                    f"{step * args.batch_size * world / (time.time() - t0):.0f} seq/s",
                    flush=True,
                )
                running = 0.0
            if step >= args.max_steps:
                break
    dist.barrier()
    if rank == 0:
        print(f"done: {step} steps in {time.time() - t0:.1f}s", flush=True)
        os.makedirs("/tmp/mlm-tiny", exist_ok=True)
        torch.save(model.module.state_dict(), "/tmp/mlm-tiny/model.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
