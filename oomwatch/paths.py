"""Where the host's kernel files live. Roots are arguments: tests point them at fixture trees,
containers at the host's bind mounts (node_exporter's ``--path.procfs``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostPaths:
    proc: Path = Path("/proc")
    sys: Path = Path("/sys")
    cgroup: Path = Path("/sys/fs/cgroup")
    kmsg: Path = Path("/dev/kmsg")
