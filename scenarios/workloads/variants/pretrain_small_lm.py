"""Pretrain a tiny language model on a JSON-lines corpus (single process, CPU, ``print`` logging).

    python pretrain_small_lm.py --corpus corpus.jsonl [--stream]

The corpus is hashed into an 8k vocabulary word by word and cut into 64-token blocks.

What goes wrong (only said here): the script first reads every line into a list of dicts, then
tokenizes everything into one Python list of ints (~36 bytes per token: a pointer and an int
object) and only then calls ``torch.tensor(ids)``: the 120 MiB corpus becomes well over a GiB of
Python objects before the first training step. The fixed twin (``--stream``) reads the file line by
line in an ``IterableDataset`` and yields blocks as it goes.
"""

import argparse
import json
import zlib

import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

VOCAB, BLOCK, EOS = 8192, 64, 0


def tokenize(text):
    return [1 + zlib.crc32(w.encode()) % (VOCAB - 1) for w in text.split()]


class LineStream(IterableDataset):
    def __init__(self, path):
        self.path = path

    def __iter__(self):
        buf = []
        with open(self.path) as f:
            for line in f:
                buf.extend(tokenize(json.loads(line)["text"]) + [EOS])
                while len(buf) >= BLOCK + 1:
                    yield torch.tensor(buf[: BLOCK + 1])
                    buf = buf[BLOCK + 1 :]


def load_blocks(path):
    with open(path) as f:
        docs = [json.loads(line) for line in f]
    print(f"read {len(docs)} documents")
    ids = []
    for doc in docs:
        ids.extend(tokenize(doc["text"]) + [EOS])
    print(f"{len(ids)} tokens")
    data = torch.tensor(ids)
    n = len(data) // (BLOCK + 1)
    return TensorDataset(data[: n * (BLOCK + 1)].view(n, BLOCK + 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--corpus", required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--stream", action="store_true")
    args = p.parse_args()

    print(f"loading {args.corpus}")
    if args.stream:
        loader = DataLoader(LineStream(args.corpus), batch_size=args.batch_size)
    else:
        loader = DataLoader(load_blocks(args.corpus), batch_size=args.batch_size, shuffle=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(VOCAB, 64), torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, VOCAB)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step, batch in enumerate(loader):
        block = batch[0] if isinstance(batch, list) else batch
        logits = model(block[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), block[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")
        if step + 1 == args.steps:
            break
    print("done")


if __name__ == "__main__":
    main()
