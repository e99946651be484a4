"""Promoter / background classification of DNA windows with a small transformer, under torchrun.

    torchrun --nproc-per-node 2 train_promoter.py [--steps 250] [--v2]

Windows of 128 overlapping 3-mers (64 tokens + specials) are synthetic here: random sequence, with a
TATA-like motif planted at a random position in the positives. Each rank draws its own windows.
The user wants to see, after training, where the last layer's heads look around the motif, so the
training loop keeps the last block's attention weights of every batch and rank 0 writes a summary at
the end. Logs with ``logging`` on rank 0.

What goes wrong (only said here): each step appends ``attn.detach()`` of the last block
(8 x 4 x 128 x 128 float32, 2 MiB) and the labels to lists that are only reduced at the end of
training: both ranks grow by 2 MiB or more a step until one is killed. The fixed twin (``--v2``) adds each
step's maps into a per-class running sum of shape (2, 4, 128, 128) and keeps counts.
"""

import argparse
import logging
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

SEQ = 128
KMERS = 64  # 4**3
VOCAB = KMERS + 2  # + [CLS], [PAD]
CLS = KMERS
MOTIF = [int(c) for c in "3030330"]  # T A T A T T A, base codes A=0 C=1 G=2 T=3


def kmer_tokens(bases):
    """(B, SEQ + 2) base codes -> (B, SEQ) overlapping 3-mer ids, [CLS] first."""
    ids = bases[:, :-2] * 16 + bases[:, 1:-1] * 4 + bases[:, 2:]
    return torch.cat([torch.full((len(ids), 1), CLS), ids[:, : SEQ - 1]], dim=1)


def draw_batch(batch, g):
    bases = torch.randint(0, 4, (batch, SEQ + 2), generator=g)
    labels = torch.randint(0, 2, (batch,), generator=g)
    pos = torch.randint(10, SEQ - 20, (batch,), generator=g)
    motif = torch.tensor(MOTIF)
    for i in torch.nonzero(labels).flatten().tolist():
        bases[i, pos[i] : pos[i] + len(MOTIF)] = motif
    return kmer_tokens(bases), labels


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.ff = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.ln1(x)
        a, weights = self.attn(h, h, h, need_weights=True, average_attn_weights=False)
        x = x + a
        return x + self.ff(self.ln2(x)), weights


class PromoterNet(torch.nn.Module):
    def __init__(self, dim=128, heads=4, depth=4):
        super().__init__()
        self.tok = torch.nn.Embedding(VOCAB, dim)
        self.pos = torch.nn.Parameter(torch.zeros(SEQ, dim))
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.head = torch.nn.Linear(dim, 2)

    def forward(self, ids):
        x = self.tok(ids) + self.pos
        for block in self.blocks:
            x, weights = block(x)
        return self.head(x[:, 0]), weights


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    logging.basicConfig(format="%(asctime)s - %(levelname)s - %(name)s - %(message)s", level=logging.INFO)
    log = logging.getLogger("promoter")
    if rank != 0:
        log.setLevel(logging.WARNING)

    torch.manual_seed(0)
    model = DDP(PromoterNet())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(100 + rank)
    attn_maps, attn_labels = [], []
    attn_sum = torch.zeros(2, 4, SEQ, SEQ)
    attn_count = torch.zeros(2)
    log.info("training for %d steps, batch %d per rank", args.steps, args.batch_size)
    t0, hits, seen = time.time(), 0, 0
    for step in range(1, args.steps + 1):
        ids, labels = draw_batch(args.batch_size, g)
        logits, weights = model(ids)
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.v2:
            with torch.no_grad():
                attn_sum.index_add_(0, labels, weights.detach())
                attn_count += torch.bincount(labels, minlength=2)
        else:
            attn_maps.append(weights.detach())
            attn_labels.append(labels)
        hits += (logits.argmax(-1) == labels).sum().item()
        seen += len(labels)
        if step % args.log_every == 0:
            log.info(
                "step %d/%d loss=%.4f acc=%.3f lr=%.1e %.2fs/it",
                step,
                args.steps,
                loss.item(),
                hits / seen,
                opt.param_groups[0]["lr"],
                (time.time() - t0) / step,
            )
            hits = seen = 0

    if not args.v2:
        for maps, labs in zip(attn_maps, attn_labels, strict=True):
            attn_sum.index_add_(0, labs, maps)
            attn_count += torch.bincount(labs, minlength=2)
    dist.all_reduce(attn_sum)
    dist.all_reduce(attn_count)
    if rank == 0:
        mean = attn_sum / attn_count.clamp_min(1)[:, None, None, None]
        cls_row = mean[:, :, 0, 1:]
        peak = cls_row.mean(1).argmax(-1).tolist()
        log.info("[CLS] attention peaks: background at %d, promoter at %d", *peak)
        torch.save({"mean_attention": mean, "count": attn_count}, "/tmp/promoter_attention.pt")
        log.info("done in %.1fs", time.time() - t0)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
