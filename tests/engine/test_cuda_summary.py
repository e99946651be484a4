"""torch.cuda.memory_summary()'s table alone: CUDA OOMs > 0 is a GPU OOM; reserved >> allocated
is fragmentation. The table is real (a public fairseq fine-tuning note: torch 1.x, units MB/GB);
the torch 2.x rows use KiB/MiB (torch/cuda/memory.py `_format_size`)."""

from __future__ import annotations

from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.scanner import Scanner

RULES = load_rules()
MB = 1024 * 1024

TABLE = """|===========================================================================|
|                  PyTorch CUDA memory summary, device ID 0                 |
|---------------------------------------------------------------------------|
|            CUDA OOMs: 58           |        cudaMalloc retries: 66        |
|===========================================================================|
|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
|---------------------------------------------------------------------------|
| Allocated memory      |   14935 MB |   15377 MB |     995 GB |     980 GB |
|       from large pool |   14932 MB |   15374 MB |     995 GB |     980 GB |
|       from small pool |       2 MB |       3 MB |       0 GB |       0 GB |
|---------------------------------------------------------------------------|
| Active memory         |   14935 MB |   15377 MB |     995 GB |     980 GB |
|       from large pool |   14932 MB |   15374 MB |     995 GB |     980 GB |
|       from small pool |       2 MB |       3 MB |       0 GB |       0 GB |
|---------------------------------------------------------------------------|
| GPU reserved memory   |   15552 MB |   15560 MB |   51434 MB |   35882 MB |
|       from large pool |   15548 MB |   15556 MB |   51424 MB |   35876 MB |
|       from small pool |       4 MB |       4 MB |      10 MB |       6 MB |
|---------------------------------------------------------------------------|
| Non-releasable memory |  631465 KB |    1511 MB |  419075 MB |  418459 MB |
"""


def _diag(text: str):
    scanner = Scanner(RULES)
    return diagnose([scanner.scan("train.log", [text.encode()])], RULES)


def test_table_alone_is_a_cuda_oom_of_a_full_gpu() -> None:
    d = _diag(TABLE)
    assert (d.verdict, d.confirmed) == ("cuda_oom", True)
    assert (d.facts["cuda.summary_allocated_bytes"], d.facts["cuda.summary_reserved_bytes"]) == (14935 * MB, 15552 * MB)
    assert d.facts["cuda.summary_unallocated_share"] < 0.05
    assert [c.id for c in d.causes][0] == "gpu_memory_exceeded"


def test_reserved_far_above_allocated_is_fragmentation() -> None:
    text = TABLE.replace("|   14935 MB |   15377 MB |     995 GB |     980 GB |\n|       from large pool |   14932",
                         "|    9935 MB |   15377 MB |     995 GB |     980 GB |\n|       from large pool |   14932", 1)  # fmt: skip
    d = _diag(text)
    assert d.verdict == "cuda_oom"
    assert d.causes[0].id == "cuda_fragmentation" and d.cause_determined
    assert any("memory_summary" in r for r in d.causes[0].reasons)
    assert "expandable_segments:True" in d.causes[0].fix


def test_no_ooms_is_no_failure() -> None:
    d = _diag(TABLE.replace("CUDA OOMs: 58 ", "CUDA OOMs: 0  "))
    assert d.verdict == "no_oom_evidence"


def test_the_oom_message_figures_win_over_the_table() -> None:
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "15.78 GiB of which 10.00 MiB is free. Of the allocated memory 9.00 GiB is allocated by PyTorch, and "
        "100.00 MiB is reserved by PyTorch but unallocated.\n"
    )
    text = TABLE.replace("|   14935 MB |   15377 MB |", "|    5935 MB |   15377 MB |", 1)
    d = _diag(oom + text)
    assert d.facts["cuda.fragmented"] is False
    assert d.causes[0].id == "gpu_memory_exceeded"


def test_the_table_of_the_gpu_that_failed_is_read() -> None:
    # one table per GPU: GPU 0 failed (fragmented), GPU 1 is healthy and printed after it
    failed = TABLE.replace("|   14935 MB |   15377 MB |     995 GB |     980 GB |\n|       from large pool |   14932",
                           "|    9935 MB |   15377 MB |     995 GB |     980 GB |\n|       from large pool |   14932", 1)  # fmt: skip
    healthy = TABLE.replace("CUDA OOMs: 58 ", "CUDA OOMs: 0  ").replace("device ID 0", "device ID 1")
    d = _diag(failed + healthy)
    assert d.facts["cuda.summary_allocated_bytes"] == 9935 * MB
    assert d.causes[0].id == "cuda_fragmentation"


def test_rank_prefixed_table() -> None:
    d = _diag("".join(f"[rank0]: {line}\n" for line in TABLE.splitlines()))
    assert d.verdict == "cuda_oom"
    assert d.facts["cuda.summary_reserved_bytes"] == 15552 * MB
