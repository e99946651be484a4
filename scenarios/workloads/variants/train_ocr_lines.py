"""Script identification on text-line crops with Lightning (single CPU process, 2 DataLoader workers).

    python train_ocr_lines.py --lines 4000 --epochs 2 [--v2]

Line crops (64 x 1024 grayscale) are rendered in the workers (synthesized from the line id here, a
stand-in for cropping and deskewing a page scan). Rendering is slow, so the rendered crops are kept
in a list shared by the workers, made with ``multiprocessing.Manager().list()``, for the next epoch.
Output: Lightning's own lines and progress bar.

What goes wrong (only said here): the shared list lives in the manager's server process; every
rendered crop (256 KiB) is pickled to it and stays, so the manager process grows by the size of the
rendered dataset until the kernel kills it, and the workers then fail on their next access. The
fixed twin (``--v2``) renders in the workers every time and shares nothing.
"""

import argparse
import multiprocessing
import os
import tempfile

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset


def render_line(i, h=64, w=1024):
    g = torch.Generator().manual_seed(i)
    ink = (torch.rand(1, h // 4, w // 4, generator=g) > 0.7).float()
    return torch.nn.functional.interpolate(ink[None], size=(h, w), mode="bilinear")[0]


class Lines(Dataset):
    def __init__(self, n, rendered=None):
        self.n, self.rendered = n, rendered

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.rendered is None:
            return render_line(i), i % 6
        crop = self.rendered[i]
        if crop is None:
            crop = render_line(i).numpy()
            self.rendered[i] = crop
        return torch.as_tensor(crop), i % 6


class ScriptID(L.LightningModule):
    def __init__(self, lr=2e-3):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 8, stride=8),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2),
            torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(32, 6),
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lines", type=int, default=4000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    rendered = None if args.v2 else multiprocessing.Manager().list([None] * args.lines)
    loader = DataLoader(Lines(args.lines, rendered), batch_size=args.batch_size, shuffle=True, num_workers=2)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=args.epochs,
        default_root_dir=os.path.join(tempfile.gettempdir(), "ocr-lines"),
        enable_checkpointing=False,
    )
    trainer.fit(ScriptID(), loader)


if __name__ == "__main__":
    main()
