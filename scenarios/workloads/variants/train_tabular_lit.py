"""Tabular classification with Lightning (single CPU process): an MLP on synthetic features.

    python train_tabular_lit.py --epochs 4

Healthy on its own (a few hundred MiB). Used where something else started from the same job
script takes the memory.
"""

import argparse
import os
import tempfile

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class MLP(L.LightningModule):
    def __init__(self, features=64, hidden=256, classes=4, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(features, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, classes),
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=40_000)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    args = p.parse_args()

    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.rows, 64, generator=g)
    y = (x[:, :4].argmax(1) + (x[:, 4] > 1).long()) % 4
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=args.epochs,
        default_root_dir=os.path.join(tempfile.gettempdir(), "tabular"),
        enable_checkpointing=False,
    )
    trainer.fit(MLP(), loader)


if __name__ == "__main__":
    main()
