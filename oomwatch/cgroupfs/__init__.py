"""Pure parsers and thin readers for cgroup v1 and v2 memory files, and detection of where a
process's memory cgroup lives. Missing files are normal and read as None."""

from __future__ import annotations

from oomwatch.cgroupfs.memory import CgroupMemory, read_cgroup_memory

__all__ = ["CgroupMemory", "read_cgroup_memory"]
