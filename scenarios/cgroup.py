"""Real cgroup v1 memory limits and the kernel's ring buffer.

Create a child of this process's own v1 memory cgroup, put a process tree in it, read its
counters, and always remove it again; read ``/dev/kmsg`` records (non-blocking) after a
known sequence number. Used by the scenario runner and by the live-cgroup tests
(``tests/cgroup_util.py`` re-exports the helpers under their old names).

Everything here is stdlib only and needs root plus a writable cgroup v1 memory controller
(``N:memory:/path`` in ``/proc/self/cgroup``, hierarchy mounted at ``/sys/fs/cgroup/memory``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from oomwatch.procfs.kmsg import KmsgRecord, parse_kmsg_record
from oomwatch.procfs.kmsg import kmsg_records as _kmsg_records

V1_ROOT = Path("/sys/fs/cgroup/memory")
KMSG = "/dev/kmsg"
__all__ = [
    "V1_ROOT",
    "KmsgRecord",
    "cgroup_path_of",
    "cgroup_pids",
    "enter",
    "kill_cgroup_procs",
    "kmsg_last_seq",
    "kmsg_records",
    "memory_cgroup",
    "oom_kill_count",
    "own_memory_cgroup",
    "parse_kmsg_record",
    "parse_size",
    "read_int",
    "read_kmsg",
    "remove_cgroup",
    "v1_memory_parent",
]


# --------------------------------------------------------------------------- cgroups


def own_memory_cgroup() -> str | None:
    """This process's path in the v1 memory hierarchy (the ``N:memory:/path`` line), or None."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                return path
    except (OSError, ValueError):
        return None
    return None


def v1_memory_parent() -> Path | None:
    """The directory of our own memory cgroup when we may create children in it, else None."""
    own = own_memory_cgroup()
    if own is None:
        return None
    parent = V1_ROOT / own.lstrip("/")
    if (parent / "memory.limit_in_bytes").exists() and os.access(parent, os.W_OK):
        return parent
    return None


def cgroup_path_of(cg: Path) -> str:
    """The cgroup's path as the kernel prints it (relative to the hierarchy root)."""
    return "/" + str(cg.relative_to(V1_ROOT))


def parse_size(text: str) -> int:
    """``1500M``, ``2G``, ``512k`` or plain bytes -> bytes (binary multiples, as the kernel)."""
    s = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def read_int(path: Path) -> int | None:
    """An integer cgroup file, or None when it is missing or unreadable."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def oom_kill_count(cg: Path) -> int | None:
    """The ``oom_kill`` counter from ``memory.oom_control`` (kernels >= 4.13), or None."""
    try:
        for line in (cg / "memory.oom_control").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def cgroup_pids(cg: Path) -> list[int]:
    """The thread-group ids in the cgroup (``cgroup.procs``); empty once it is gone."""
    try:
        return [int(p) for p in (cg / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_cgroup_procs(cg: Path) -> list[int]:
    """SIGKILL every process in ``cg`` (a cgroup we created: only our own processes are in it)."""
    pids = cgroup_pids(cg)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def remove_cgroup(cg: Path, timeout: float = 20.0) -> None:
    """Kill what is left in ``cg`` and ``rmdir`` it; killed tasks may take a moment to leave."""
    deadline = time.monotonic() + timeout
    while cg.exists():
        if not kill_cgroup_procs(cg):
            try:
                cg.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
        if time.monotonic() > deadline:
            raise RuntimeError(f"cgroup {cg} still busy: pids {cgroup_pids(cg)}")
        time.sleep(0.1)


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int | None, name: str = "oomwatch-test") -> Iterator[Path]:
    """A fresh child memory cgroup with ``memory.limit_in_bytes`` (and memsw) set.

    ``limit_bytes`` None leaves it unlimited (the cgroup then only scopes accounting and the
    kernel's messages). On exit every process still in it is SIGKILLed and it is removed,
    whatever happened inside the ``with`` block.
    """
    parent = v1_memory_parent()
    if parent is None:
        raise RuntimeError("no writable cgroup v1 memory controller (needs root and cgroup v1)")
    cg = parent / f"{name}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    cg.mkdir()
    try:
        if limit_bytes is not None:
            (cg / "memory.limit_in_bytes").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):  # no swap accounting on some kernels
                (cg / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        yield cg
    finally:
        remove_cgroup(cg)


def enter(cg: Path) -> None:
    """``preexec_fn``: move the forked child (before it execs) into the cgroup."""
    (cg / "cgroup.procs").write_text(str(os.getpid()))


# --------------------------------------------------------------------------- /dev/kmsg


def kmsg_records(after: int = -1) -> list[KmsgRecord]:
    """Every record now in the kernel ring buffer with a sequence number above ``after``."""
    return _kmsg_records(after, Path(KMSG))


def read_kmsg(after: int = -1) -> list[tuple[int, bytes]]:
    """(sequence number, raw record) for every record after ``after`` (the old test helper API)."""
    return [(r.seq, r.raw) for r in kmsg_records(after)]


def kmsg_last_seq() -> int:
    """The sequence number of the newest record in the ring buffer (-1 when it is empty)."""
    return max((r.seq for r in kmsg_records()), default=-1)
