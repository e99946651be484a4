"""A GRU language model over an 8k subword vocabulary, trained with accelerate (2 CPU processes).

    accelerate launch --multi_gpu --num_processes 2 train_char_lm.py [--v2]

Each process prints its loss and its resident memory (``VmRSS`` from ``/proc/self/status``) every
10 steps; the epoch-end line reports next-token accuracy over the epoch.

What goes wrong (only said here): the loop keeps every step's output, ``epoch_logits.append(logits)``
(4 x 64 x 8,000 float32, 7.8 MiB, still attached to its autograd graph), and the labels, to compute
the accuracy once the epoch is over. Nothing is freed before then, so both processes grow by ~8 MiB
a step until one is killed. The fixed twin (``--v2``) counts correct predictions as Python ints each
step.
"""

import argparse

import torch
from accelerate import Accelerator

VOCAB = 8000


def vmrss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class GRULM(torch.nn.Module):
    def __init__(self, dim=128):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, dim)
        self.rnn = torch.nn.GRU(dim, dim, batch_first=True)
        self.out = torch.nn.Linear(dim, VOCAB)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return self.out(h)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    torch.manual_seed(0)
    model = GRULM()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    model, opt = accelerator.prepare(model, opt)
    g = torch.Generator().manual_seed(rank)
    epoch_logits, epoch_labels = [], []
    correct = total = 0
    for step in range(args.steps):
        ids = torch.randint(0, VOCAB, (args.batch_size, args.seq_len + 1), generator=g)
        logits = model(ids[:, :-1])
        labels = ids[:, 1:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        if args.v2:
            correct += (logits.argmax(-1) == labels).sum().item()
            total += labels.numel()
        else:
            epoch_logits.append(logits)
            epoch_labels.append(labels)
        if step % 10 == 0:
            print(f"[{rank}] step {step:4d} | loss {loss.item():.4f} | VmRSS {vmrss_mib():.0f} MiB", flush=True)
    if not args.v2:
        preds = torch.cat(epoch_logits).argmax(-1)
        correct, total = (preds == torch.cat(epoch_labels)).sum().item(), preds.numel()
    print(f"[{rank}] epoch done | acc {correct / total:.4f}", flush=True)


if __name__ == "__main__":
    main()
