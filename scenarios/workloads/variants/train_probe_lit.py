"""Train a small head on frozen convolutional features with Lightning (single process, no workers).

    python train_probe_lit.py --samples 6000 --epochs 3 [--online]

A frozen random-feature stem turns each 112 x 112 image into a 64 x 28 x 28 feature map inside the
Dataset; only the head is trained. Output: Lightning's own lines and progress bar.

What goes wrong (only said here): the features are memoized in a module-level dict,
``_FEATURES[idx] = feats``, "so that epochs 2+ are free". Nothing ever leaves the dict: it gains
196 KiB per sample in the training process until the process is killed, long before the first
epoch is over. The fixed twin (``--online``) computes the features each time.
"""

import argparse
import os
import tempfile

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

_FEATURES = {}


class ProbeData(Dataset):
    def __init__(self, n, online):
        self.n, self.online = n, online
        torch.manual_seed(0)
        self.stem = torch.nn.Conv2d(3, 64, 7, stride=4, padding=3).requires_grad_(False)

    def __len__(self):
        return self.n

    def features(self, idx):
        g = torch.Generator().manual_seed(idx)
        img = torch.rand(1, 3, 112, 112, generator=g)
        with torch.no_grad():
            return torch.relu(self.stem(img))[0]

    def __getitem__(self, idx):
        if self.online:
            return self.features(idx), idx % 10
        if idx not in _FEATURES:
            _FEATURES[idx] = self.features(idx)
        return _FEATURES[idx], idx % 10


class Head(L.LightningModule):
    def __init__(self, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(64, 32, 3, stride=2),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(32, 10),
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=6000)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--online", action="store_true")
    args = p.parse_args()

    loader = DataLoader(ProbeData(args.samples, args.online), batch_size=args.batch_size, shuffle=True)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=args.epochs,
        limit_train_batches=0.35,
        default_root_dir=os.path.join(tempfile.gettempdir(), "probe"),
        enable_checkpointing=False,
    )
    trainer.fit(Head(), loader)


if __name__ == "__main__":
    main()
