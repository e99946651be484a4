"""Forecast electricity load 24 steps ahead from the last 96, over thousands of meters, with DataLoader workers.

    python train_load_forecast.py [--meters 3200] [--epochs 4] [--num-workers 3] [--v2]

The readings stand in for a smart-meter export (one column per meter, 15-minute readings): a daily
and weekly cycle per meter, a trend and noise, generated with a fixed seed into a pandas DataFrame.
Each meter's column is kept as a list of floats; a sample is a window of one meter (96 inputs, the
next 24 as targets), scaled by the meter's mean. The model is a small MLP. A validation pass over
the last weeks follows every epoch; the workers are started anew for each pass (the DataLoader's
default). Prints a line every 200 steps and the validation MAE.

What goes wrong (only said here): 3,200 lists of 2,688 Python floats are ~8.6 million float
objects (~260 MiB with their list slots) in the main process. The forked workers share those pages,
but slicing a window takes a reference to each float in it and writes its refcount: every page of
floats a worker reads is copied into it. Each worker's private memory climbs over its epoch towards
the share of the data it read, on top of the main process's own copy. ``--v2`` keeps the readings
in one (meters, steps) float32 numpy array and slices that.
"""

import argparse
import time

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

STEPS = 2688  # four weeks of 15-minute readings
IN, OUT, STRIDE = 96, 24, 8
VALID = 672  # the last week


def make_readings(meters, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(STEPS)
    base = rng.lognormal(0.0, 0.6, size=meters)
    daily = np.sin(2 * np.pi * (t[:, None] / 96 + rng.random(meters)))
    weekly = 0.3 * np.sin(2 * np.pi * t[:, None] / 672)
    trend = rng.normal(0, 1e-4, size=meters) * t[:, None]
    noise = rng.normal(0, 0.1, size=(STEPS, meters))
    load = base * (1.5 + 0.5 * daily + weekly + trend + noise)
    return pd.DataFrame(load.astype(np.float64), columns=[f"MT_{i:04d}" for i in range(meters)])


class Windows(Dataset):
    """Windows over each meter's readings (a list of floats per meter), from ``start`` to ``end``."""

    def __init__(self, series, start, end):
        self.series = series
        self.scale = [float(np.mean(s[: start or end])) for s in series]
        self.index = [(m, t) for m in range(len(series)) for t in range(start, end - IN - OUT + 1, STRIDE)]

    def __len__(self):
        return len(self.index)

    def window(self, m, t):
        w = self.series[m][t : t + IN + OUT]
        return torch.tensor(w, dtype=torch.float32) / self.scale[m]

    def __getitem__(self, i):
        m, t = self.index[i]
        w = self.window(m, t)
        return w[:IN], w[IN:]


class ArrayWindows(Windows):
    """The same windows over one (meters, steps) float32 array."""

    def __init__(self, values, start, end):
        self.values = values
        self.scale = values[:, : start or end].mean(axis=1)
        m, t = np.meshgrid(np.arange(len(values)), np.arange(start, end - IN - OUT + 1, STRIDE), indexing="ij")
        self.index = np.stack([m.ravel(), t.ravel()], axis=1)

    def window(self, m, t):
        return torch.from_numpy(self.values[m, t : t + IN + OUT] / self.scale[m])


def main():
    p = argparse.ArgumentParser(description="Load forecasting MLP")
    p.add_argument("--meters", type=int, default=3200)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--num-workers", type=int, default=3, help="DataLoader worker processes")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--v2", action="store_true")
    args = p.parse_args()

    t0 = time.time()
    df = make_readings(args.meters)
    if args.v2:
        kind, series = ArrayWindows, np.ascontiguousarray(df.to_numpy(dtype=np.float32).T)
    else:
        kind, series = Windows, [df[c].tolist() for c in df.columns]
    del df
    train, valid = kind(series, 0, STEPS - VALID), kind(series, STEPS - VALID - IN, STEPS)
    print(f"{args.meters} meters, {len(train)} training windows, {len(valid)} validation windows "
          f"({time.time() - t0:.1f}s)", flush=True)  # fmt: skip
    train_loader = DataLoader(train, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers)
    valid_loader = DataLoader(valid, batch_size=1024, num_workers=args.num_workers)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, OUT)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    step = 0
    for epoch in range(1, args.epochs + 1):
        t0, total, n = time.time(), 0.0, 0
        model.train()
        for x, y in train_loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            total, n = total + loss.item(), n + 1
            if step % 200 == 0:
                print(f"epoch {epoch} step {step} loss {total / n:.4f}", flush=True)
        model.eval()
        with torch.no_grad():
            mae = [torch.nn.functional.l1_loss(model(x), y, reduction="sum").item() for x, y in valid_loader]
        print(f"epoch {epoch}/{args.epochs} train loss {total / n:.4f} valid MAE "
              f"{sum(mae) / (len(valid) * OUT):.4f} ({time.time() - t0:.1f}s)", flush=True)  # fmt: skip
    torch.save(model.state_dict(), "/tmp/load_forecast.pt")


if __name__ == "__main__":
    main()
