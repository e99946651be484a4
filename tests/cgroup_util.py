"""Real cgroup v1 memory limits for tests: a thin re-export of ``scenarios.cgroup``
(create a child of our own memory cgroup, run a process in it, read what the kernel said in
/dev/kmsg, and always remove the cgroup)."""

from __future__ import annotations

from scenarios.cgroup import (
    V1_ROOT,
    cgroup_path_of,
    enter,
    kmsg_last_seq,
    memory_cgroup,
    own_memory_cgroup,
    read_kmsg,
    v1_memory_parent,
)

__all__ = [
    "V1_ROOT",
    "cgroup_path_of",
    "enter",
    "kmsg_last_seq",
    "memory_cgroup",
    "own_memory_cgroup",
    "read_kmsg",
    "v1_memory_parent",
]
