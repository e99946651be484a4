"""Action recognition on short clips with a small 3D CNN and Lightning (single CPU process).

    python train_video_lit.py [--v2]

Clips (8 frames of 112 x 112) are decoded in 3 persistent DataLoader workers (synthesized per
index here, a stand-in for video decoding). Output: Lightning's own lines and progress bar.

What goes wrong (only said here): the DataModule uses ``prefetch_factor=32`` (with
``pin_memory=True``, which CPU-only torch ignores with a warning): up to 3 x 32 batches of
8 x 3 x 8 x 112 x 112 float32 (9.2 MiB each) wait in shared memory because the 3D convolutions are
slower than the decoding. The queued batches are shmem charged to the cgroup but mapped by no
process, so the kernel kills the largest process, the training process. The fixed twin (``--v2``)
uses the default prefetch_factor (2).
"""

import argparse
import os
import tempfile

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset


class Clips(Dataset):
    def __init__(self, n, frames=8, size=112):
        self.n, self.shape = n, (3, frames, size, size)

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        g = torch.Generator().manual_seed(idx)
        return torch.rand(self.shape, generator=g), idx % 20


class ClipData(L.LightningDataModule):
    def __init__(self, clips, batch_size, v2):
        super().__init__()
        self.clips, self.batch_size, self.v2 = clips, batch_size, v2

    def train_dataloader(self):
        return DataLoader(
            Clips(self.clips),
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=3,
            persistent_workers=True,
            pin_memory=True,
            prefetch_factor=2 if self.v2 else 32,
        )


class C3D(L.LightningModule):
    def __init__(self, lr=1e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Conv3d(3, 16, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3)),
            torch.nn.ReLU(),
            torch.nn.Conv3d(16, 32, 3, stride=2),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool3d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(32, 20),
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--clips", type=int, default=8 * 400)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-steps", type=int, default=25)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=args.max_steps,
        log_every_n_steps=5,
        default_root_dir=os.path.join(tempfile.gettempdir(), "c3d"),
        enable_checkpointing=False,
    )
    trainer.fit(C3D(), datamodule=ClipData(args.clips, args.batch_size, args.v2))


if __name__ == "__main__":
    main()
