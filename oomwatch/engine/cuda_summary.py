"""torch.cuda.memory_summary()'s table in a log: allocated against reserved GPU memory (pure).

The table (torch/cuda/memory.py) has a row per metric, its first column the current usage::

    | Allocated memory      |   14935 MB |   15377 MB |     995 GB |     980 GB |
    ...
    | GPU reserved memory   |   15552 MB |   15560 MB |   51434 MB |   35882 MB |

Reserved but not allocated is what the caching allocator holds in free blocks: when it is a large
share of what it reserved, an allocation can fail for want of one block big enough (fragmentation).
The rows are events ``cuda_memory_summary`` (rules/fingerprints/cuda.yaml); a table is an
allocated row followed, within the same table, by a reserved row.
"""

from __future__ import annotations

from collections.abc import Sequence

from oomwatch.engine.model import Event
from oomwatch.engine.sizes import parse_size

TABLE_ROWS = 16  # the reserved row is the 9th line after the allocated one (its pools and a rule between)
HEADER_ROWS = 6  # the `CUDA OOMs:` cell is 4 lines above the allocated row


def summary_facts(events: Sequence[Event]) -> dict[str, int | float | None]:
    """``cuda.summary_*`` of the last whole table in the inputs whose `CUDA OOMs:` is above 0 (a job
    prints one per GPU, or one at each failure), else of the last whole table; None without one."""
    ooms_at: tuple[str, int] | None = None  # where the last `CUDA OOMs: N > 0` cell was
    allocated: tuple[str, int, int, bool] | None = None  # file, line, bytes, its table counted OOMs
    tables: list[tuple[int, int, bool]] = []
    for ev in events:
        if ev.kind == "cuda_oom" and "ooms" in ev.fields:
            ooms_at = (ev.line.file, ev.line.no)
        if ev.kind != "cuda_memory_summary":
            continue
        if "allocated" in ev.fields:
            size = parse_size(ev.fields["allocated"])
            failed = ooms_at is not None and ooms_at[0] == ev.line.file and 0 < ev.line.no - ooms_at[1] <= HEADER_ROWS
            allocated = (ev.line.file, ev.line.no, size, failed) if size is not None else None
        elif "reserved" in ev.fields and allocated is not None:
            file, no, alloc, failed = allocated
            reserved = parse_size(ev.fields["reserved"])
            if reserved is not None and file == ev.line.file and 0 < ev.line.no - no <= TABLE_ROWS:
                tables.append((alloc, reserved, failed))
            allocated = None
    table = next((t for t in reversed(tables) if t[2]), tables[-1] if tables else None)
    if table is None:
        return {"cuda.summary_allocated_bytes": None, "cuda.summary_reserved_bytes": None,
                "cuda.summary_unallocated_share": None}  # fmt: skip
    alloc, reserved, _ = table
    share = max(reserved - alloc, 0) / reserved if reserved > 0 else None
    return {
        "cuda.summary_allocated_bytes": alloc,
        "cuda.summary_reserved_bytes": reserved,
        "cuda.summary_unallocated_share": share,
    }
