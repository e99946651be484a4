"""Train TransE knowledge-graph embeddings with filtered negative sampling and DataLoader workers.

    python train_kge.py [--triples 2000000] [--epochs 2] [--num-workers 3] [--v2]

The graph stands in for a Freebase-style dump: 100,000 entities, 48 relations, heads drawn with a
heavy tail (a few hubs, many leaves). It is generated with a fixed seed and kept as a list of
(head, relation, tail) tuples, with a set of them to filter the negatives: for each true triple a
worker corrupts the head or the tail until the corrupted triple is not a known one. The model scores
a triple by ``-||h + r - t||`` and is trained with a margin loss. Prints a line every 200 steps and
the mean rank of a few hundred held-out triples after each epoch.

What goes wrong (only said here): ~1.7 million distinct tuples, each with its own two int objects
for the entity ids, and the set's table beside them are ~400 MiB of small Python objects in the main
process. The 3 forked workers share those pages at first, but ``self.triples[i]`` takes a reference
to the tuple and its ints, writing their refcounts: every page of tuples a worker reads is copied
into it. A page holds some thirty of them: by the time a worker has read a few percent of the
triples, within seconds of the first epoch, it holds its own copy of most of the list's pages.
``--v2`` keeps the triples in one (N, 3) int64 numpy array and the
known ones as a sorted array of int64 keys (``np.searchsorted`` to filter): the workers only read
those pages.
"""

import argparse
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

ENTITIES = 100_000
RELATIONS = 48


def make_graph(n, seed=0):
    """(n, 3) int64 triples, distinct: heavy-tailed heads, tails near the head's community."""
    rng = np.random.default_rng(seed)
    m = int(n * 1.15)
    heads = rng.permutation(ENTITIES)[np.minimum(rng.zipf(1.3, size=m) - 1, ENTITIES - 1)]
    rels = rng.integers(0, RELATIONS, size=m)
    tails = (heads + rng.integers(1, 5_000, size=m) * (rels + 1)) % ENTITIES
    keys = np.unique((heads * RELATIONS + rels) * ENTITIES + tails)
    keys = keys[rng.permutation(len(keys))[:n]]
    return np.stack([keys // ENTITIES // RELATIONS, keys // ENTITIES % RELATIONS, keys % ENTITIES], axis=1)


class TupleTriples(Dataset):
    """Triples as a list of tuples, the known ones as a set (the usual way)."""

    def __init__(self, triples, seed=0):
        self.triples = [(h, r, t) for h, r, t in triples.tolist()]
        self.known = set(self.triples)
        self.seed = seed

    def __len__(self):
        return len(self.triples)

    def is_known(self, h, r, t):
        return (h, r, t) in self.known

    def triple(self, i):
        return self.triples[i]

    def __getitem__(self, i):
        h, r, t = self.triple(i)
        rng = np.random.default_rng((self.seed, i))
        while True:
            e = int(rng.integers(ENTITIES))
            neg = (e, r, t) if rng.random() < 0.5 else (h, r, e)
            if not self.is_known(*neg):
                return (h, r, t), neg


class PackedTriples(TupleTriples):
    """The same triples as one int64 array; the known ones as sorted keys."""

    def __init__(self, triples, seed=0):
        self.triples = np.ascontiguousarray(triples, dtype=np.int64)
        self.keys = np.sort(self._key(self.triples[:, 0], self.triples[:, 1], self.triples[:, 2]))
        self.seed = seed

    @staticmethod
    def _key(h, r, t):
        return (h * RELATIONS + r) * ENTITIES + t

    def is_known(self, h, r, t):
        k = self._key(h, r, t)
        j = np.searchsorted(self.keys, k)
        return j < len(self.keys) and self.keys[j] == k

    def triple(self, i):
        return tuple(int(x) for x in self.triples[i])


def collate(batch):
    pos = torch.tensor([p for p, _ in batch])
    neg = torch.tensor([n for _, n in batch])
    return pos, neg


class TransE(torch.nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.ent = torch.nn.Embedding(ENTITIES, dim)
        self.rel = torch.nn.Embedding(RELATIONS, dim)
        torch.nn.init.uniform_(self.ent.weight, -0.1, 0.1)
        torch.nn.init.uniform_(self.rel.weight, -0.1, 0.1)

    def forward(self, x):
        return -(self.ent(x[:, 0]) + self.rel(x[:, 1]) - self.ent(x[:, 2])).norm(p=1, dim=1)


@torch.no_grad()
def mean_rank(model, test):
    scores = []
    for h, r, t in test.tolist():
        cand = torch.arange(ENTITIES)
        x = torch.stack([torch.full_like(cand, h), torch.full_like(cand, r), cand], dim=1)
        s = model(x)
        scores.append(int((s > s[t]).sum()) + 1)
    return float(np.mean(scores))


def main():
    p = argparse.ArgumentParser(description="TransE knowledge-graph embeddings")
    p.add_argument("--triples", type=int, default=2_000_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--num-workers", type=int, default=3, help="DataLoader worker processes")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--margin", type=float, default=1.0)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    t0 = time.time()
    graph = make_graph(args.triples + 300)
    train, test = graph[:-300], graph[-300:]
    ds = PackedTriples(train) if args.v2 else TupleTriples(train)
    del graph, train
    print(f"{len(ds)} training triples, {ENTITIES} entities, {RELATIONS} relations ({time.time() - t0:.1f}s)",
          flush=True)  # fmt: skip
    loader = DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        collate_fn=collate,
        persistent_workers=args.num_workers > 0,
    )
    torch.manual_seed(0)
    model = TransE()
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    step = 0
    for epoch in range(1, args.epochs + 1):
        t0, total, n = time.time(), 0.0, 0
        for pos, neg in loader:
            loss = torch.relu(args.margin - model(pos) + model(neg)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            total, n = total + loss.item(), n + 1
            if step % 200 == 0:
                print(f"epoch {epoch} step {step} loss {total / n:.4f}", flush=True)
        print(f"epoch {epoch}/{args.epochs} loss {total / n:.4f} mean rank {mean_rank(model, test):.0f} "
              f"({time.time() - t0:.1f}s)", flush=True)  # fmt: skip
    torch.save({"entities": model.ent.weight, "relations": model.rel.weight}, "/tmp/transe.pt")


if __name__ == "__main__":
    main()
