"""Document classification with Lightning DDP (2 CPU processes) on a tokenized Arrow shard.

The tokenized corpus is one Arrow file written by ``datasets`` (``data-00000-of-00001.arrow``); the
DataModule opens it with ``datasets.Dataset.from_file`` in ``setup()``, which Lightning calls in
every DDP process.

    python train_doc_classifier.py --shard DATASET_DIR/data-00000-of-00001.arrow [--v2]

What goes wrong (only said here): ``Dataset.from_file(path, in_memory=True)`` reads the whole
160 MiB table into each process's anonymous memory (briefly ~2.5x while reading): two private
copies, next to two Lightning processes. The fixed twin (``--v2``) opens the file memory-mapped
(``in_memory=False``, the default), so both processes share the page cache.
"""

import argparse
import os
import tempfile

import lightning as L
import torch
from datasets import Dataset
from torch.utils.data import DataLoader


class ShardData(L.LightningDataModule):
    def __init__(self, shard, batch_size, v2):
        super().__init__()
        self.shard, self.batch_size, self.v2 = shard, batch_size, v2

    def setup(self, stage):
        ds = Dataset.from_file(self.shard) if self.v2 else Dataset.from_file(self.shard, in_memory=True)
        self.train = ds.with_format("torch")

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=True)


class DocClassifier(L.LightningModule):
    def __init__(self, vocab=32000, dim=64, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.emb = torch.nn.EmbeddingBag(vocab, dim, mode="mean")
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.GELU(), torch.nn.Linear(dim, 2))

    def training_step(self, batch, batch_idx):
        logits = self.mlp(self.emb(batch["input_ids"].long()))
        loss = torch.nn.functional.cross_entropy(logits, batch["label"])
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shard", required=True)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-steps", type=int, default=20)
    p.add_argument("--root-dir", default=os.path.join(tempfile.gettempdir(), "doc-classifier"))
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    L.seed_everything(0)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=args.max_steps,
        log_every_n_steps=10,
        default_root_dir=args.root_dir,
        enable_checkpointing=False,
    )
    trainer.fit(DocClassifier(), datamodule=ShardData(args.shard, args.batch_size, args.v2))


if __name__ == "__main__":
    main()
