"""cgroup v1 memory controller files (Documentation/admin-guide/cgroup-v1/memory.rst).

Sample (``memory.stat``)::

    cache 0
    rss 28057600

``memory.limit_in_bytes`` reads 9223372036854771712 when unlimited; that is None here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from oomwatch.cgroupfs.files import parse_flat_keyed, parse_limit, parse_value, read_optional


@dataclass(frozen=True)
class OomControl:
    oom_kill_disable: bool | None
    under_oom: bool | None
    oom_kill: int | None  # Linux 4.13+


def parse_oom_control(text: str | None) -> OomControl:
    kv = parse_flat_keyed(text)
    disable = kv.get("oom_kill_disable")
    under = kv.get("under_oom")
    return OomControl(
        oom_kill_disable=None if disable is None else bool(disable),
        under_oom=None if under is None else bool(under),
        oom_kill=kv.get("oom_kill"),
    )


@dataclass(frozen=True)
class V1Memory:
    usage: int | None
    limit: int | None
    max_usage: int | None
    failcnt: int | None
    stat: dict[str, int] = field(default_factory=dict)
    oom_control: OomControl | None = None


def read_v1_memory(cgroup_dir: Path) -> V1Memory:
    oom = read_optional(cgroup_dir / "memory.oom_control")
    return V1Memory(
        usage=parse_value(read_optional(cgroup_dir / "memory.usage_in_bytes")),
        limit=parse_limit(read_optional(cgroup_dir / "memory.limit_in_bytes")),
        max_usage=parse_value(read_optional(cgroup_dir / "memory.max_usage_in_bytes")),
        failcnt=parse_value(read_optional(cgroup_dir / "memory.failcnt")),
        stat=parse_flat_keyed(read_optional(cgroup_dir / "memory.stat")),
        oom_control=None if oom is None else parse_oom_control(oom),
    )
