"""One view of a cgroup's memory, whichever the version: usage, limit, peak, anon/file/shmem,
OOM kills, pressure. Missing files (old kernels, no PSI, the root cgroup) are None, not errors.

v1 files: Documentation/admin-guide/cgroup-v1/memory.rst; v2: Documentation/admin-guide/cgroup-v2.rst.
Sample (v2 ``memory.current`` / v1 ``memory.usage_in_bytes``)::

    28487680
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from oomwatch.cgroupfs.v1 import read_v1_memory
from oomwatch.cgroupfs.v2 import read_v2_memory
from oomwatch.paths import HostPaths
from oomwatch.procfs.pressure import Pressure, read_pressure_file


@dataclass(frozen=True)
class CgroupMemory:
    version: int | None  # None: neither v1 nor v2 memory files are there
    usage: int | None
    limit: int | None
    peak: int | None
    anon: int | None
    file: int | None
    shmem: int | None
    swap: int | None
    oom_kill: int | None
    pressure: Pressure | None


def read_cgroup_memory(paths: HostPaths, cgroup_dir: Path, pressure_dir: Path | None = None) -> CgroupMemory:
    """``cgroup_dir`` relative paths are taken under ``paths.cgroup``. On hybrid hosts PSI is in the
    v2 directory: pass it as ``pressure_dir``."""
    d = paths.cgroup / cgroup_dir
    pressure = read_pressure_file((paths.cgroup / pressure_dir if pressure_dir else d) / "memory.pressure")
    if (d / "memory.current").exists():
        v2 = read_v2_memory(d)
        return CgroupMemory(
            version=2,
            usage=v2.current,
            limit=v2.max,
            peak=v2.peak,
            anon=v2.stat.get("anon"),
            file=v2.stat.get("file"),
            shmem=v2.stat.get("shmem"),
            swap=v2.swap_current,
            oom_kill=v2.events.get("oom_kill"),
            pressure=pressure,
        )
    if (d / "memory.usage_in_bytes").exists():
        # total_* include child cgroups, as v2 memory.stat does
        v1 = read_v1_memory(d)
        return CgroupMemory(
            version=1,
            usage=v1.usage,
            limit=v1.limit,
            peak=v1.max_usage,
            anon=v1.stat.get("total_rss", v1.stat.get("rss")),
            file=v1.stat.get("total_cache", v1.stat.get("cache")),
            shmem=v1.stat.get("total_shmem", v1.stat.get("shmem")),
            swap=v1.stat.get("total_swap", v1.stat.get("swap")),
            oom_kill=v1.oom_control.oom_kill if v1.oom_control else None,
            pressure=pressure,
        )
    return CgroupMemory(None, None, None, None, None, None, None, None, None, pressure)
