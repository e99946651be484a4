"""Tabular regression with a wide MLP: train, then validate every epoch; logs its own RSS with psutil.

    python train_regressor.py --epochs 2 [--v2]

What goes wrong (only said here): the validation loop runs without ``torch.no_grad()`` and keeps
each batch's loss tensor, ``val_losses.append(loss)``, to average them at the end. Every kept loss
holds its autograd graph and with it the activations the MLP saved for backward (~4 MiB per batch),
so the first validation pass grows the process by ~4 MiB a batch until it is killed. The fixed
twin (``--v2``) validates under ``torch.no_grad()`` and keeps ``loss.item()``.
"""

import argparse
import contextlib
import os

import psutil
import torch

proc = psutil.Process(os.getpid())


def rss_mb():
    return proc.memory_info().rss / 1024**2


def batches(n, batch_size, features, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(features, 1, generator=g)
    for _ in range(n):
        x = torch.randn(batch_size, features, generator=g)
        yield x, x @ w + 0.1 * torch.randn(batch_size, 1, generator=g)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-batches", type=int, default=120)
    p.add_argument("--val-batches", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.features, args.hidden),
        torch.nn.GELU(),
        torch.nn.Linear(args.hidden, args.hidden),
        torch.nn.GELU(),
        torch.nn.Linear(args.hidden, 1),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params, rss {rss_mb():.1f} MB")

    for epoch in range(args.epochs):
        model.train()
        for step, (x, y) in enumerate(batches(args.train_batches, args.batch_size, args.features, seed=epoch)):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if step % 20 == 0:
                print(f"epoch {epoch} step {step} train_loss {loss.item():.4f} rss {rss_mb():.1f} MB")

        model.eval()
        val_losses = []
        with torch.no_grad() if args.v2 else contextlib.nullcontext():
            for i, (x, y) in enumerate(batches(args.val_batches, args.batch_size, args.features, seed=1000)):
                loss = torch.nn.functional.mse_loss(model(x), y)
                val_losses.append(loss.item() if args.v2 else loss)
                if i % 10 == 0:
                    print(f"  val batch {i} rss {rss_mb():.1f} MB")
        val_loss = sum(float(v) for v in val_losses) / len(val_losses)
        print(f"epoch {epoch} val_loss {val_loss:.4f} rss {rss_mb():.1f} MB")


if __name__ == "__main__":
    main()
