"""Build the data the scenarios read, once, outside the memory cgroup (cached between runs).

    python -m scenarios.prepare arrow DIR --mb 512        # a tokenized Arrow dataset (save_to_disk)
    python -m scenarios.prepare checkpoint FILE --mb 340  # a training checkpoint (model, EMA, Adam state)
    python -m scenarios.prepare jsonl FILE --mb 200       # a JSON-lines text corpus (id, text, label, source)
    python -m scenarios.prepare parquet DIR --mb 200      # the same records as DIR/train.parquet (HF cache warmed)
    python -m scenarios.prepare hf_model DIR --mb 240     # a GPT-2 model directory, config.json + pytorch_model.bin
    python -m scenarios.prepare lightning FILE --mb 100   # a Lightning pretraining checkpoint (weights + Adam)
    python -m scenarios.prepare coco FILE --mb 60         # COCO-style instances JSON (images, boxes)

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

__all__ = [
    "make_arrow_dataset",
    "make_checkpoint",
    "make_coco",
    "make_hf_model",
    "make_jsonl",
    "make_lightning_checkpoint",
    "make_parquet",
    "main",
]

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


_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "de", "ga", "po", "li", "an", "er", "is", "on", "um")
_SOURCES = ("forum", "news", "reviews", "wiki", "books")


def _records(mb: int, seed: int = 0):
    """Chunks of (id, text, label, source) rows, about ``mb`` MiB of JSON lines in all."""
    import numpy as np

    rng = np.random.default_rng(seed)
    words = sorted({"".join(rng.choice(_SYLLABLES, size=int(rng.integers(1, 5)))) for _ in range(6000)})
    vocab = np.array(words, dtype=object)
    target = mb * (1 << 20)
    written = i = 0
    while written < target:
        rows = []
        for _ in range(2000):
            n = int(rng.integers(40, 160))
            text = " ".join(vocab[rng.integers(0, len(vocab), size=n)])
            rows.append({"id": f"doc-{i:08d}", "text": text, "label": int(i % 5), "source": _SOURCES[i % 5]})
            written += len(text) + 60
            i += 1
        yield rows


def make_jsonl(path: Path, mb: int) -> Path:
    """A JSON-lines corpus of about ``mb`` MiB: ``{"id", "text", "label", "source"}`` per line."""
    params: dict[str, object] = {"kind": "jsonl", "mb": mb}
    marker = path.with_name(path.name + ".done")
    if path.exists() and _done(marker, params):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        for rows in _records(mb):
            f.write("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, path)
    marker.write_text(json.dumps(params))
    return path


def make_parquet(path: Path, mb: int) -> Path:
    """``DIR/train.parquet``: the same kind of records, about ``mb`` MiB of text. Loading it with
    ``datasets.load_dataset("parquet", data_files={"train": ...})`` here (every time: it is quick
    once done) leaves the Arrow conversion in the ``datasets`` cache, so that a run inside the
    cgroup only reads it."""
    params: dict[str, object] = {"kind": "parquet", "mb": mb}
    marker = path / ".oomwatch-done"
    target = path / "train.parquet"
    if not _done(marker, params):
        import pyarrow as pa
        import pyarrow.parquet as pq

        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        writer = None
        for rows in _records(mb, seed=1):
            table = pa.Table.from_pylist(rows)
            writer = writer or pq.ParquetWriter(target, table.schema)
            writer.write_table(table)
        assert writer is not None
        writer.close()
        marker.write_text(json.dumps(params))
    import datasets

    datasets.load_dataset("parquet", data_files={"train": str(target)}, split="train")
    return path


def make_hf_model(path: Path, mb: int) -> Path:
    """A ``transformers`` GPT-2 model directory of about ``mb`` MiB (float32): ``config.json``
    from ``save_pretrained`` and the weights in the torch format, ``pytorch_model.bin``."""
    params: dict[str, object] = {"kind": "hf_model", "mb": mb}
    marker = path / ".oomwatch-done"
    if _done(marker, params):
        return path
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    dim, vocab = 512, 32000
    per_layer = 12 * dim * dim * 4
    layers = max(1, (mb * (1 << 20) - vocab * dim * 4) // per_layer)
    config = GPT2Config(
        vocab_size=vocab, n_positions=512, n_embd=dim, n_layer=int(layers), n_head=8, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    config.save_pretrained(path)
    torch.save(model.state_dict(), path / "pytorch_model.bin")
    marker.write_text(json.dumps(params))
    return path


def make_lightning_checkpoint(path: Path, mb: int) -> Path:
    """A Lightning checkpoint (``trainer.save_checkpoint``) of the encoder the Lightning
    fine-tuning workload starts from: about ``mb`` MiB of weights plus their two Adam moments."""
    params: dict[str, object] = {"kind": "lightning", "mb": mb}
    marker = path.with_name(path.name + ".done")
    if path.exists() and _done(marker, params):
        return path
    sys.path.insert(0, str(Path(__file__).resolve().parent / "workloads" / "variants"))
    from finetune_cls import pretrain_checkpoint  # the module the workload fine-tunes

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pretrain_checkpoint(tmp, mb)
    os.replace(tmp, path)
    marker.write_text(json.dumps(params))
    return path


def make_coco(path: Path, mb: int) -> Path:
    """A COCO-style ``instances.json`` of about ``mb`` MiB: images, 1-12 boxes each, 80 categories."""
    params: dict[str, object] = {"kind": "coco", "mb": mb}
    marker = path.with_name(path.name + ".done")
    if path.exists() and _done(marker, params):
        return path
    import numpy as np

    rng = np.random.default_rng(2)
    images, annotations = [], []
    size = ann_id = 0
    while size < mb * (1 << 20):
        img_id = len(images) + 1
        h, w = int(rng.integers(300, 640)), int(rng.integers(300, 640))
        images.append({"id": img_id, "file_name": f"train2017/{img_id:012d}.jpg", "height": h, "width": w})
        for _ in range(int(rng.integers(1, 13))):
            ann_id += 1
            x, y = float(rng.uniform(0, w - 20)), float(rng.uniform(0, h - 20))
            bw, bh = float(rng.uniform(8, w - x)), float(rng.uniform(8, h - y))
            bbox = [round(x, 2), round(y, 2), round(bw, 2), round(bh, 2)]
            annotations.append(
                {
                    "id": ann_id,
                    "image_id": img_id,
                    "category_id": int(rng.integers(1, 81)),
                    "bbox": bbox,
                    "area": round(bw * bh, 2),
                    "iscrowd": 0,
                }
            )
            size += 150
        size += 100
    categories = [{"id": i, "name": f"class_{i}", "supercategory": "thing"} for i in range(1, 81)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    os.replace(tmp, path)
    marker.write_text(json.dumps(params))
    return path


BUILDERS = {
    "arrow": make_arrow_dataset,
    "checkpoint": make_checkpoint,
    "jsonl": make_jsonl,
    "parquet": make_parquet,
    "hf_model": make_hf_model,
    "lightning": make_lightning_checkpoint,
    "coco": make_coco,
}


def main(argv: list[str] | None = None) -> int:
    """``python -m scenarios.prepare KIND PATH --mb N``."""
    p = argparse.ArgumentParser(prog="python -m scenarios.prepare", description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=sorted(BUILDERS))
    p.add_argument("path", type=Path)
    p.add_argument("--mb", type=int, required=True)
    args = p.parse_args(argv)
    BUILDERS[args.kind](args.path, args.mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
