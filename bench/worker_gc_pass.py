"""What does a forked DataLoader worker un-share of its parent without touching the dataset's objects?

A worker over numpy storage (the copy-on-write fix) reads none of the dataset's Python objects, yet its private
set (USS) is not zero: its loop writes some of its parent's pages at once, and when its garbage collector makes a
full pass it writes the header of every object the interpreter tracks (the modules, classes, functions and
containers torch and numpy left in the parent), and so un-shares every page that holds one. Whether that pass
comes during a worker's life depends on how many objects survive its younger collections; it cannot be seen
from the parent.

This runs one small torch job (a float32 array, a DataLoader over it, a small model trained on its batches) three
times in fresh interpreters, the workers' garbage collector

  as is    nothing changed: in a worker's first seconds a full pass has usually not come yet (the floor),
  collect  gc.collect() in worker_init_fn: one full pass at once (the floor and the pass),
  off      gc.disable() in worker_init_fn: what the loop un-shares without its younger collections either,
  frozen   gc.freeze() in the parent just before the workers start, and gc.collect() in worker_init_fn: the
           pass without the parent's objects (the advice of rules/causes.yaml's cow_refcount_defeat fix),

samples each worker's USS (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup) and anonymous memory after
its first batches, and prints the median per mode and the pass (collect - as is), beside the constants
oomwatch.estimate.fixes uses (WORKER_FLOOR, GC_PASS).

    python bench/worker_gc_pass.py                 # 2 workers, text
    python bench/worker_gc_pass.py --workers 3 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODES = ("as is", "collect", "off", "frozen")
MIB = 1 << 20


def _private(pid: int) -> tuple[int, int] | None:
    """(USS, anonymous) bytes of ``pid`` from its smaps_rollup; None once it is gone."""
    fields: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    except OSError:
        return None
    return fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0), fields.get("Anonymous", 0)


def _job(mode: str, workers: int, seconds: float) -> dict:
    """The job itself, in a fresh interpreter: each worker's (USS, anon) after ``seconds`` of training."""
    import gc

    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Rows(Dataset):
        def __init__(self, values: np.ndarray) -> None:
            self.values = values

        def __len__(self) -> int:
            return len(self.values) * 64

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            row = self.values[i % len(self.values)]
            return torch.from_numpy(row[:96].copy()), torch.from_numpy(row[96:120].copy())

    def init(_: int) -> None:
        if mode == "off":
            gc.disable()
        elif mode in ("collect", "frozen"):
            gc.collect()

    values = np.random.default_rng(0).random((8192, 2048), dtype=np.float32)  # 64 MiB
    model = torch.nn.Sequential(torch.nn.Linear(96, 256), torch.nn.GELU(), torch.nn.Linear(256, 24))
    opt = torch.optim.AdamW(model.parameters())
    loader = DataLoader(Rows(values), batch_size=256, shuffle=True, num_workers=workers,
                        worker_init_fn=None if mode == "as is" else init)  # fmt: skip
    if mode == "frozen":
        gc.freeze()  # the parent's objects into the permanent generation, which no collection visits
    it = iter(loader)
    pids = [w.pid for w in it._workers]  # the DataLoader's own handles on its worker processes
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        x, y = next(it)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    held = [p for p in (_private(pid) for pid in pids) if p is not None]
    return {"mode": mode, "workers": [{"uss": u, "anon": a} for u, a in held], "parent": _private_self()}


def _private_self() -> dict:
    import os

    uss, anon = _private(os.getpid()) or (0, 0)
    return {"uss": uss, "anon": anon}


def measure(workers: int = 2, seconds: float = 1.5, timeout: float = 120.0) -> dict:
    """Each mode's job in a fresh interpreter; the median worker USS of each, the floor (as is) and the pass
    (collect - as is)."""
    out: dict = {"workers": workers, "seconds": seconds, "modes": {}}
    for mode in MODES:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--workers", str(workers), "--seconds", str(seconds)],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"the {mode!r} job failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
        job = json.loads(proc.stdout.strip().splitlines()[-1])
        if len(job["workers"]) != workers:
            raise RuntimeError(f"the {mode!r} job: {len(job['workers'])} of {workers} workers were sampled")
        out["modes"][mode] = {
            "worker_uss_median": int(statistics.median(w["uss"] for w in job["workers"])),
            "workers": job["workers"],
            "parent": job["parent"],
        }
    m = out["modes"]
    out["floor"] = m["as is"]["worker_uss_median"]
    out["gc_pass"] = m["collect"]["worker_uss_median"] - m["as is"]["worker_uss_median"]
    from oomwatch.estimate.fixes import GC_PASS, WORKER_FLOOR

    out["model"] = {"WORKER_FLOOR": WORKER_FLOOR, "GC_PASS": GC_PASS}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    p.add_argument("--seconds", type=float, default=1.5, help="training time before the sample (default 1.5)")
    p.add_argument("--json", action="store_true", help="print the measurement as JSON")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.workers < 1:
        p.error("--workers must be at least 1")
    if args.child:
        print(json.dumps(_job(args.child, args.workers, args.seconds)))
        return 0
    r = measure(args.workers, args.seconds)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    print(f"{args.workers} DataLoader workers, sampled after {args.seconds:g} s of training (USS, MiB):")
    for mode, m in r["modes"].items():
        each = ", ".join(f"{w['uss'] / MIB:.0f}" for w in m["workers"])
        print(f"  gc {mode:<8} median {m['worker_uss_median'] / MIB:6.1f}   each {each}")
    print(
        f"floor without a full pass: {r['floor'] / MIB:.1f} MiB (WORKER_FLOOR {r['model']['WORKER_FLOOR'] / MIB:.0f})"
    )
    print(f"a full pass un-shares:     {r['gc_pass'] / MIB:.1f} MiB (GC_PASS {r['model']['GC_PASS'] / MIB:.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
