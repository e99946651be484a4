"""``/proc/PID/cgroup``: where a process sits in each cgroup hierarchy (man 7 cgroups, "/proc/pid/cgroup").

Samples (v1 ``hierarchy-id:controllers:path``; v2 is the line with id 0 and no controllers)::

    4:memory:/process_api/4b1437077037b65564293ec702d547b2
    0::/kubepods/burstable/pod1b2c/c1
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.paths import HostPaths
from oomwatch.procfs import process_files


@dataclass(frozen=True)
class CgroupMembership:
    hierarchy_id: int | None
    controllers: frozenset[str]
    path: str


def parse_proc_cgroup(text: str) -> list[CgroupMembership]:
    """Every ``id:controllers:path`` line; lines without two colons are skipped, an id that is not a
    number is None."""
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid = int(parts[0]) if parts[0].isdigit() else None
        controllers = frozenset(c for c in parts[1].split(",") if c)
        out.append(CgroupMembership(hid, controllers, parts[2]))
    return out


def read_proc_cgroup_text(paths: HostPaths, pid: int, errors: str = "strict") -> str:
    """The file's text (``errors``: how undecodable bytes are read); raises ProcessGone."""
    with process_files(pid):
        return (paths.proc / str(pid) / "cgroup").read_text(errors=errors)


def read_proc_cgroup(paths: HostPaths, pid: int, errors: str = "strict") -> list[CgroupMembership]:
    """:func:`parse_proc_cgroup` of ``/proc/PID/cgroup``; raises ProcessGone (or OSError)."""
    return parse_proc_cgroup(read_proc_cgroup_text(paths, pid, errors))
