"""cgroup v2 memory controller files (Documentation/admin-guide/cgroup-v2.rst, "Memory Interface Files").

Sample (``memory.events``)::

    low 0
    high 0

``memory.max`` reads ``max`` when unlimited (None here); ``memory.peak`` (Linux 5.19+) and
``memory.events`` ``oom_group_kill`` (5.17+) are missing on older kernels: None, not an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from oomwatch.cgroupfs.files import parse_flat_keyed, parse_limit, parse_value, read_optional


@dataclass(frozen=True)
class V2Memory:
    current: int | None
    max: int | None
    peak: int | None
    swap_current: int | None
    stat: dict[str, int] = field(default_factory=dict)
    events: dict[str, int] = field(default_factory=dict)


def read_v2_memory(cgroup_dir: Path) -> V2Memory:
    return V2Memory(
        current=parse_value(read_optional(cgroup_dir / "memory.current")),
        max=parse_limit(read_optional(cgroup_dir / "memory.max")),
        peak=parse_value(read_optional(cgroup_dir / "memory.peak")),
        swap_current=parse_value(read_optional(cgroup_dir / "memory.swap.current")),
        stat=parse_flat_keyed(read_optional(cgroup_dir / "memory.stat")),
        events=parse_flat_keyed(read_optional(cgroup_dir / "memory.events")),
    )
