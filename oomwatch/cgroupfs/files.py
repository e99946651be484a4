"""Shared helpers for cgroup interface files: single values, flat-keyed files, optional reads.

Missing files are normal (old kernels, no controller, the root cgroup): :func:`read_optional`
returns None for them instead of raising.
"""

from __future__ import annotations

from pathlib import Path

from oomwatch.procfs import flat_keyed, to_int

# v1 "no limit" is PAGE_COUNTER_MAX * PAGE_SIZE: 9223372036854771712 with 4 KiB pages; other
# page sizes round differently, so anything at or above 2**62 bytes is "no limit".
NO_LIMIT_FLOOR = 1 << 62


def read_optional(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def parse_value(text: str | None) -> int | None:
    """A single-value file: a number, or None for ``max``, empty or garbage."""
    if text is None:
        return None
    value = text.strip()
    if value == "max":
        return None
    return to_int(value)


def parse_limit(text: str | None) -> int | None:
    """A limit: None for v2 ``max`` and for the v1 huge "unlimited" value."""
    value = parse_value(text)
    return None if value is None or value >= NO_LIMIT_FLOOR else value


def parse_flat_keyed(text: str | None) -> dict[str, int]:
    """``key value`` lines (memory.stat, memory.events, memory.oom_control); garbage lines skipped."""
    return flat_keyed(text)
