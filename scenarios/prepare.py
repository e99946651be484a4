"""Build the data the scenarios read, once, outside the memory cgroup (cached between runs).

    python -m scenarios.prepare arrow DIR --mb 512        # a tokenized Arrow dataset (save_to_disk)
    python -m scenarios.prepare checkpoint FILE --mb 340  # a training checkpoint (model, EMA, Adam state)

A finished build leaves ``DIR/.oomwatch-done`` (or ``FILE.done``) holding its parameters, so a
rerun with the same parameters does nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

__all__ = ["make_arrow_dataset", "make_checkpoint", "main"]

SEQ_LEN = 512


def _done(marker: Path, params: dict[str, object]) -> bool:
    try:
        return json.loads(marker.read_text()) == params
    except (OSError, ValueError):
        return False


def make_arrow_dataset(path: Path, mb: int) -> Path:
    """A ``datasets`` dataset of ``mb`` MiB: int32 ``input_ids`` rows of 512 tokens and a label."""
    params: dict[str, object] = {"kind": "arrow", "mb": mb, "seq_len": SEQ_LEN}
    marker = path / ".oomwatch-done"
    if _done(marker, params):
        return path
    import datasets
    import numpy as np
    import pyarrow as pa

    rows = mb * (1 << 20) // (SEQ_LEN * 4)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 32000, size=rows * SEQ_LEN, dtype=np.int32)
    ids = pa.FixedSizeListArray.from_arrays(pa.array(tokens), SEQ_LEN)
    labels = pa.array(rng.integers(0, 2, size=rows, dtype=np.int64))
    table = pa.table({"input_ids": ids, "label": labels})
    features = datasets.Features(
        {"input_ids": datasets.Sequence(datasets.Value("int32"), length=SEQ_LEN), "label": datasets.Value("int64")}
    )
    ds = datasets.Dataset(table.cast(features.arrow_schema))
    if path.exists():
        shutil.rmtree(path)
    ds.save_to_disk(str(path), max_shard_size="2GB")
    marker.write_text(json.dumps(params))
    return path


def make_checkpoint(path: Path, mb: int) -> Path:
    """A ``torch.save``d training checkpoint of about ``mb`` MiB, as a trainer's
    ``save_checkpoint`` writes it: model weights, their EMA, and the two Adam moments
    (a quarter each)."""
    params: dict[str, object] = {"kind": "checkpoint", "mb": mb}
    marker = path.with_name(path.name + ".done")
    if path.exists() and _done(marker, params):
        return path
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent / "workloads"))
    from checkpoint_per_rank import build_model  # the same model the workload trains

    model = build_model(mb // 4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    ema = {k: v.clone() for k, v in model.state_dict().items()}
    torch.save({"model": model.state_dict(), "ema": ema, "optimizer": opt.state_dict(), "step": 1000}, tmp)
    os.replace(tmp, path)
    marker.write_text(json.dumps(params))
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m scenarios.prepare KIND PATH --mb N``."""
    p = argparse.ArgumentParser(prog="python -m scenarios.prepare", description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=["arrow", "checkpoint"])
    p.add_argument("path", type=Path)
    p.add_argument("--mb", type=int, required=True)
    args = p.parse_args(argv)
    if args.kind == "arrow":
        make_arrow_dataset(args.path, args.mb)
    else:
        make_checkpoint(args.path, args.mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
