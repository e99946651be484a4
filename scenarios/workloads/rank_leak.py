"""DDP language-model training where every rank keeps each step's logits "for the epoch-end
metrics" (``outputs.append(logits)``): a host tensor per step that is never freed, so every
rank grows by batch x seq x vocab x 4 bytes per step until the memory limit kills one.
``--no-keep-outputs`` keeps only Python floats (``loss.item()``, accuracy) per step.

    torchrun --nproc-per-node 2 rank_leak.py [--no-keep-outputs]
"""

import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def _rss_mib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 >> 20


class TinyLM(torch.nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids):
        return self.head(self.emb(ids))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--no-keep-outputs", dest="keep_outputs", action="store_false")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DDP(TinyLM(args.vocab, args.dim))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    outputs = []  # for epoch-end perplexity / accuracy
    losses = []
    for step in range(args.steps):
        ids = torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1))
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, args.vocab), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.keep_outputs:
            outputs.append(logits)
            losses.append(loss)
        else:
            losses.append(loss.item())
        if step % 5 == 0:  # like many training scripts, log this process's resident memory
            print(f"[rank {rank}] step {step} loss {loss.item():.4f} rss={_rss_mib()}MiB", flush=True)
    mean_loss = sum(float(x) for x in losses) / len(losses)
    if rank == 0:
        print(f"[rank {rank}] epoch done: mean loss {mean_loss:.4f}", flush=True)
    dist.barrier()  # every rank done before the group goes (gloo can abort a rank torn down first)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
