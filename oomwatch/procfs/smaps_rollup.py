"""``/proc/PID/smaps_rollup`` (Linux 4.14+) and its fallback ``/proc/PID/smaps``
(Documentation/filesystems/proc.rst, "smaps" and Documentation/ABI/testing/procfs-smaps_rollup).

Sample::

    Rss:               34040 kB
    Pss:               32765 kB

Both files cost a page-table walk proportional to the process's memory; read them on a budget.
USS (unique set size) = Private_Clean + Private_Dirty.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.paths import HostPaths
from oomwatch.procfs import kb_lines, process_files

_FIELDS = {
    "Rss": "rss",
    "Pss": "pss",
    "Pss_Anon": "pss_anon",
    "Pss_File": "pss_file",
    "Pss_Shmem": "pss_shmem",
    "Shared_Clean": "shared_clean",
    "Shared_Dirty": "shared_dirty",
    "Private_Clean": "private_clean",
    "Private_Dirty": "private_dirty",
    "Swap": "swap",
    "SwapPss": "swap_pss",
}


@dataclass(frozen=True)
class SmapsRollup:
    rss: int | None = None
    pss: int | None = None
    pss_anon: int | None = None
    pss_file: int | None = None
    pss_shmem: int | None = None
    shared_clean: int | None = None
    shared_dirty: int | None = None
    private_clean: int | None = None
    private_dirty: int | None = None
    swap: int | None = None
    swap_pss: int | None = None

    @property
    def uss(self) -> int | None:
        if self.private_clean is None or self.private_dirty is None:
            return None
        return self.private_clean + self.private_dirty


def parse_smaps_rollup(text: str) -> SmapsRollup:
    kb = kb_lines(text)
    return SmapsRollup(**{attr: kb.get(key) for key, attr in _FIELDS.items()})


def parse_smaps(text: str) -> SmapsRollup:
    """Sum the per-mapping ``Key: N kB`` lines of ``/proc/PID/smaps`` into one rollup."""
    totals: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if not sep or key not in _FIELDS:
            continue  # mapping header lines ("555a...-555b... r-xp ...") and other keys
        one = kb_lines(line)
        if key in one:
            totals[key] = totals.get(key, 0) + one[key]
    return SmapsRollup(**{attr: totals.get(key) for key, attr in _FIELDS.items()})


def read_smaps_rollup(paths: HostPaths, pid: int) -> SmapsRollup:
    """smaps_rollup, or the sum of smaps on kernels without it (before 4.14)."""
    base = paths.proc / str(pid)
    with process_files(pid):
        if (base / "smaps_rollup").exists():
            return parse_smaps_rollup((base / "smaps_rollup").read_text(errors="replace"))
        return parse_smaps((base / "smaps").read_text(errors="replace"))
