"""Train a hashed bag-of-words text classifier from a JSON-lines corpus, with DataLoader workers.

    python train_textcls.py --train corpus.jsonl [--lazy]

The corpus (``{"id", "text", "label", "source"}`` per line) is read once in the main process; the
three DataLoader workers tokenize samples on the fly. Only tqdm bars are shown.

What goes wrong (only said here): the corpus is kept as a Python list of dicts. The workers are
forked and start out sharing those pages with the main process, but every sample a worker reads
has the reference counts of its dict and strings incremented (and the garbage collector walks all
the dicts), which writes to the shared pages, so the kernel copies them: over an epoch each worker
ends up with a private copy of most of the list. The fixed twin (``--lazy``) memory-maps the file
with numpy and keeps only a numpy array of line offsets; a worker parses its line when asked.
"""

import argparse
import json
import zlib

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

VOCAB = 1 << 15


def tokenize(text, max_len=128):
    return [zlib.crc32(w.encode()) % VOCAB for w in text.split()[:max_len]]


class JsonlCorpus(Dataset):
    def __init__(self, path):
        with open(path) as f:
            self.rows = [json.loads(line) for line in f]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self.rows[i]
        return torch.tensor(tokenize(row["text"])), row["label"]


class LineIndexCorpus(Dataset):
    def __init__(self, path):
        self.buf = np.memmap(path, dtype=np.uint8, mode="r")
        self.ends = np.flatnonzero(self.buf == ord("\n"))
        self.starts = np.concatenate([[0], self.ends[:-1] + 1])

    def __len__(self):
        return len(self.ends)

    def __getitem__(self, i):
        row = json.loads(self.buf[self.starts[i] : self.ends[i]].tobytes())
        return torch.tensor(tokenize(row["text"])), row["label"]


def collate(batch):
    ids = [b[0] for b in batch]
    offsets = torch.tensor([0] + [len(x) for x in ids[:-1]]).cumsum(0)
    return torch.cat(ids), offsets, torch.tensor([b[1] for b in batch])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--lazy", action="store_true")
    args = p.parse_args()

    ds = LineIndexCorpus(args.train) if args.lazy else JsonlCorpus(args.train)
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, collate_fn=collate)
    torch.manual_seed(0)
    emb = torch.nn.EmbeddingBag(VOCAB, 32, mode="mean")
    head = torch.nn.Linear(32, 5)
    opt = torch.optim.Adam([*emb.parameters(), *head.parameters()], lr=1e-2)
    for epoch in range(args.epochs):
        bar = tqdm(loader, desc=f"epoch {epoch}")
        for ids, offsets, y in bar:
            loss = torch.nn.functional.cross_entropy(head(emb(ids, offsets)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar.set_postfix(loss=f"{loss.item():.3f}")


if __name__ == "__main__":
    main()
