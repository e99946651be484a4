"""Next-token pretraining of a small convolutional LM with Lightning, from a tokenized ``datasets``
dataset on disk (single CPU process).

    python train_tokens_lit.py --data DATASET_DIR [--v2]

Logging: the ``logging`` module for the script's lines, plus Lightning's own output.

What goes wrong (only said here): the dataset is turned into Python objects before training,
``rows = [ds[i] for i in range(len(ds))]`` (a dict with a Python list of 512 ints per row, ~36
bytes per token) and then ``torch.tensor([r["input_ids"] for r in rows])``: a 48 MiB Arrow
dataset becomes the better part of a GiB in the training process, which is killed before the
first step. The fixed twin (``--v2``) uses ``ds.with_format("torch")``, memory-mapped.
"""

import argparse
import logging
import os
import tempfile

import lightning as L
import torch
from datasets import load_from_disk
from torch.utils.data import DataLoader, TensorDataset

logging.basicConfig(format="%(asctime)s %(name)s %(levelname)s: %(message)s", level=logging.INFO)
log = logging.getLogger("train_tokens")
VOCAB, CTX = 32000, 64


class ConvLM(L.LightningModule):
    def __init__(self, dim=64, lr=2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.emb = torch.nn.Embedding(VOCAB, dim)
        self.conv = torch.nn.Conv1d(dim, dim, 4, padding=3)
        self.out = torch.nn.Linear(dim, VOCAB)

    def training_step(self, batch, batch_idx):
        ids = (batch[0] if isinstance(batch, list) else batch["input_ids"])[:, : CTX + 1].long()
        h = self.conv(self.emb(ids[:, :-1]).transpose(1, 2))[:, :, :CTX].transpose(1, 2)
        loss = torch.nn.functional.cross_entropy(self.out(torch.relu(h)).reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    ds = load_from_disk(args.data)
    log.info("dataset: %d rows, features %s", len(ds), list(ds.features))
    if args.v2:
        train = ds.with_format("torch")
    else:
        rows = [ds[i] for i in range(len(ds))]
        train = TensorDataset(torch.tensor([r["input_ids"] for r in rows]))
    log.info("training on %d sequences", len(train))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.max_steps,
        log_every_n_steps=10,
        default_root_dir=os.path.join(tempfile.gettempdir(), "tokens-lm"),
        enable_checkpointing=False,
    )
    trainer.fit(ConvLM(), DataLoader(train, batch_size=args.batch_size, shuffle=True))


if __name__ == "__main__":
    main()
