"""Real cgroup v1 memory limits for tests: create a child of our own memory cgroup, run a
process in it, read what the kernel said in /dev/kmsg, and always remove the cgroup."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup/memory")


def own_memory_cgroup() -> str | None:
    """This process's path in the v1 memory hierarchy (the `N:memory:/path` line)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                return path
    except OSError:
        return None
    return None


def v1_memory_parent() -> Path | None:
    """Where we may create child memory cgroups, or None."""
    own = own_memory_cgroup()
    if own is None:
        return None
    parent = V1_ROOT / own.lstrip("/")
    if (parent / "memory.limit_in_bytes").exists() and os.access(parent, os.W_OK):
        return parent
    return None


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int, name: str = "oomwatch-test") -> Iterator[Path]:
    parent = v1_memory_parent()
    assert parent is not None, "no writable cgroup v1 memory controller"
    cg = parent / f"{name}-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(limit_bytes))
        with contextlib.suppress(OSError):  # no swap accounting on some kernels
            (cg / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        yield cg
    finally:
        for _ in range(50):  # tasks may take a moment to leave after being killed
            procs = (cg / "cgroup.procs").read_text().split()
            if not procs:
                break
            for pid in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), 9)  # only processes we put in our own cgroup
            time.sleep(0.1)
        cg.rmdir()


def cgroup_path_of(cg: Path) -> str:
    """The cgroup's path as the kernel prints it (relative to the hierarchy root)."""
    return "/" + str(cg.relative_to(V1_ROOT))


def enter(cg: Path) -> None:
    """preexec_fn: move the child (before exec) into the cgroup."""
    (cg / "cgroup.procs").write_text(str(os.getpid()))


def kmsg_last_seq() -> int:
    return max((seq for seq, _ in read_kmsg()), default=-1)


def read_kmsg(after: int = -1) -> list[tuple[int, bytes]]:
    """(sequence number, raw record line) for every record in the ring buffer after `after`."""
    out: list[tuple[int, bytes]] = []
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # overwritten while reading: continue with the next one
                continue
            if not rec:
                break
            seq = int(rec.split(b";", 1)[0].split(b",")[1])
            if seq > after:
                out.append((seq, rec.rstrip(b"\n")))
    finally:
        os.close(fd)
    return out
