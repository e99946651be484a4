"""Train CBOW word embeddings (word2vec-style) on a JSON-lines corpus, with DataLoader workers.

    python train_cbow.py --corpus corpus.jsonl [--epochs 5] [--num-workers 3] [--v2]

Each document is kept as its list of words (``text.split()``) and the vocabulary is a plain dict
from word to id (words seen fewer than 5 times map to <unk>). A worker turns a document into ids
with the vocabulary and samples (context, center) windows from it; the model is an EmbeddingBag over
the 4 context words and a softmax over the vocabulary. Prints a line every 100 steps.

What goes wrong (only said here): the documents are ~52,000 Python lists holding ~5 million small
``str`` objects (~350 MiB) in the main process. The forked workers share those pages at first, but
every ``vocab.get(word)`` takes a reference to the word and writes its refcount: each page of words a
worker reads is copied into that worker. With persistent workers and shuffled epochs, each worker
ends up with its own copy of most of the corpus. ``--v2`` encodes the corpus once, while reading it,
into one numpy int32 array with document offsets; the workers only read those.
"""

import argparse
import collections
import json
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

UNK = 0
WINDOW = 2


def windows(ids, k, rng):
    """k (context, center) pairs from one document's ids."""
    if len(ids) < 2 * WINDOW + 1:
        ids = np.pad(ids, (0, 2 * WINDOW + 1 - len(ids)))
    centers = rng.integers(WINDOW, len(ids) - WINDOW, size=k)
    offsets = np.array([-2, -1, 1, 2])
    context = ids[centers[:, None] + offsets]
    return torch.from_numpy(context.astype(np.int64)), torch.from_numpy(ids[centers].astype(np.int64))


class WordDocs(Dataset):
    """Documents as lists of words, looked up in the vocabulary when sampled."""

    def __init__(self, path, min_count=5, k=4):
        with open(path) as f:
            self.docs = [json.loads(line)["text"].split() for line in f]
        counts = collections.Counter(w for doc in self.docs for w in doc)
        self.vocab = {"<unk>": UNK}
        for w, c in counts.most_common():
            if c >= min_count:
                self.vocab[w] = len(self.vocab)
        self.k = k
        self.tokens = sum(len(d) for d in self.docs)

    def __len__(self):
        return len(self.docs)

    def __getitem__(self, i):
        ids = np.array([self.vocab.get(w, UNK) for w in self.docs[i]], dtype=np.int32)
        return windows(ids, self.k, np.random.default_rng())


class PackedDocs(Dataset):
    """The same documents, encoded while reading into one int32 array with offsets."""

    def __init__(self, path, min_count=5, k=4):
        seen, counts, chunks, offsets = {}, [], [], [0]
        with open(path) as f:
            for line in f:
                ids = [seen.setdefault(w, len(seen)) for w in json.loads(line)["text"].split()]
                chunks.append(np.array(ids, dtype=np.int32))
                offsets.append(offsets[-1] + len(ids))
        flat = np.concatenate(chunks)
        del chunks
        counts = np.bincount(flat, minlength=len(seen))
        order = np.argsort(-counts, kind="stable")
        remap = np.zeros(len(seen), dtype=np.int32)
        kept = order[counts[order] >= min_count]
        remap[kept] = np.arange(1, len(kept) + 1, dtype=np.int32)
        self.ids = remap[flat]
        self.offsets = np.array(offsets, dtype=np.int64)
        self.vocab = {"<unk>": UNK, **{w: int(remap[j]) for w, j in seen.items() if remap[j]}}
        self.k = k
        self.tokens = len(self.ids)

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        ids = self.ids[self.offsets[i] : self.offsets[i + 1]]
        return windows(ids, self.k, np.random.default_rng())


def collate(batch):
    context = torch.cat([c for c, _ in batch])
    center = torch.cat([t for _, t in batch])
    return context, center


class CBOW(torch.nn.Module):
    def __init__(self, vocab, dim=64):
        super().__init__()
        self.inp = torch.nn.EmbeddingBag(vocab, dim, mode="mean")
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, context):
        return self.out(self.inp(context))


def main():
    p = argparse.ArgumentParser(description="CBOW word vectors")
    p.add_argument("--corpus", required=True, help="JSON lines with a 'text' field")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=128, help="documents per batch")
    p.add_argument("--num-workers", type=int, default=3, help="DataLoader worker processes")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    t0 = time.time()
    ds = PackedDocs(args.corpus) if args.v2 else WordDocs(args.corpus)
    print(f"{len(ds)} documents, {ds.tokens} tokens, vocabulary {len(ds.vocab)} ({time.time() - t0:.1f}s)", flush=True)
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        collate_fn=collate,
        persistent_workers=args.num_workers > 0,
    )
    torch.manual_seed(0)
    model = CBOW(len(ds.vocab))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    step = 0
    for epoch in range(1, args.epochs + 1):
        t0, total, n = time.time(), 0.0, 0
        for context, center in loader:
            loss = torch.nn.functional.cross_entropy(model(context), center)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            total, n = total + loss.item(), n + 1
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {total / n:.4f}", flush=True)
        print(f"epoch {epoch}/{args.epochs} avg loss {total / n:.4f} ({time.time() - t0:.1f}s)", flush=True)
    torch.save({"vectors": model.inp.weight.detach(), "words": list(ds.vocab)}, "/tmp/cbow_vectors.pt")


if __name__ == "__main__":
    main()
