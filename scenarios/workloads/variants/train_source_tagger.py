"""Predict which source (forum, news, reviews, wiki, books) a document comes from, with Lightning.

The corpus is loaded into a pandas DataFrame and split into words once; three DataLoader workers
hash the words of each sample into a bag-of-words. Single process, CPU.

    python train_source_tagger.py --corpus corpus.jsonl [--compact]

What goes wrong (only said here): ``df["tokens"] = df["text"].str.split()`` makes an object-dtype
column holding a Python list of Python strings per row, millions of small objects. The forked
workers share them with the main process at first, but reading a row increments the refcount of
its list and of every word in it (and the workers' garbage collector walks every list), so page
after page is copied into each worker. The fixed twin (``--compact``) hashes the words once, into
one numpy int32 array with row offsets: nothing per word for a worker to write to.
"""

import argparse
import os
import tempfile
import zlib

import lightning as L
import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

VOCAB = 1 << 12
SOURCES = ["forum", "news", "reviews", "wiki", "books"]


def word_id(w):
    return zlib.crc32(w.encode()) % VOCAB


class TokenFrame(Dataset):
    def __init__(self, df):
        self.df = df

    def __len__(self):
        return len(self.df)

    def __getitem__(self, i):
        row = self.df.iloc[i]
        return torch.tensor([word_id(w) for w in row["tokens"][:128]]), row["y"]


class PackedIds(Dataset):
    def __init__(self, df):
        ids = [np.fromiter((word_id(w) for w in t.split()), dtype=np.int32) for t in df["text"]]
        self.offsets = np.cumsum([0] + [len(x) for x in ids])
        self.ids = np.concatenate(ids)
        self.y = df["y"].to_numpy()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        s = self.offsets[i]
        return torch.from_numpy(self.ids[s : min(s + 128, self.offsets[i + 1])].astype(np.int64)), int(self.y[i])


def collate(batch):
    ids = [b[0] for b in batch]
    offsets = torch.tensor([0] + [len(x) for x in ids[:-1]]).cumsum(0)
    return torch.cat(ids), offsets, torch.tensor([b[1] for b in batch])


class SourceTagger(L.LightningModule):
    def __init__(self, dim=64, lr=5e-3):
        super().__init__()
        self.save_hyperparameters()
        self.emb = torch.nn.EmbeddingBag(VOCAB, dim, mode="mean")
        self.head = torch.nn.Linear(dim, len(SOURCES))

    def training_step(self, batch, batch_idx):
        ids, offsets, y = batch
        loss = torch.nn.functional.cross_entropy(self.head(self.emb(ids, offsets)), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--corpus", required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--root-dir", default=os.path.join(tempfile.gettempdir(), "source-tagger"))
    p.add_argument("--compact", action="store_true")
    args = p.parse_args()

    df = pd.read_json(args.corpus, lines=True)
    df["y"] = df["source"].map(SOURCES.index)
    if args.compact:
        ds = PackedIds(df)
    else:
        df["tokens"] = df["text"].str.split()
        ds = TokenFrame(df)
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers, collate_fn=collate)
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_epochs=args.epochs, default_root_dir=args.root_dir, enable_checkpointing=False
    )
    trainer.fit(SourceTagger(), loader)


if __name__ == "__main__":
    main()
