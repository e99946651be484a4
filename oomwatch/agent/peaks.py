"""Between the sampler's ticks, the highest memory each process and each job cgroup reached (``oomwatch run``).

A tick reads every process's status, smaps on a CPU budget, the cgroups and the node: a few times a second at
most. A checkpoint being loaded, a DDP rank's broadcast buffers, a collate's batch come and go faster than
that, and they are what an OOM kill and the size a job needs are decided by. ``PeakWatch`` reads two cheap
files in a thread of its own, every ``interval`` (20 ms): ``/proc/PID/statm`` of each process the last tick saw
(its anonymous memory: resident less shared, in pages) and the ``memory.stat`` of each cgroup it saw (anonymous
and shmem pages); ``take()`` hands the highest of each since the last call to the tick that follows, and starts
again. A pid that exits between ticks is skipped until the next tick names the pids again. Watching nothing, it
waits without reading.

The agent watches the processes and cgroups of the jobs in their first training steps only (agent.steps: their
output files are read every 20 ms then too): how far a step rises above where it ends is read there
(estimate.model's step_rise), and a node's dozens of processes are not read 50 times a second for its days (16
processes and their cgroup: 138 us of a CPU a round, 0.7% of one every 20 ms).
``joined`` puts what was read beside a tick's figures, as the history keeps them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from oomwatch.agent.tick import Tick
from oomwatch.paths import HostPaths
from oomwatch.procfs.statm import PAGE_SIZE

INTERVAL = 0.02  # seconds between readings
# memory.stat keys of the memory that cannot be reclaimed: v1 (with the children's, as the sampler reads it), v2
_ANON_KEYS = (("total_rss", "rss"), ("anon",))
_SHMEM_KEYS = (("total_shmem", "shmem"), ("shmem",))


def unreclaimable(stat_text: str) -> int | None:
    """Anonymous + shmem bytes of a ``memory.stat`` text (v1 or v2); None when it names neither."""
    values: dict[str, int] = {}
    for line in stat_text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[key] = int(value)
    anon = next((values[k] for keys in _ANON_KEYS for k in keys if k in values), None)
    shmem = next((values[k] for keys in _SHMEM_KEYS for k in keys if k in values), None)
    if anon is None and shmem is None:
        return None
    return (anon or 0) + (shmem or 0)


class PeakWatch:
    """The highest anonymous memory of each watched pid and anon + shmem of each watched cgroup, read every
    ``interval`` in a thread of its own until ``close()``."""

    def __init__(self, paths: HostPaths | None = None, interval: float = INTERVAL, page_size: int = 0) -> None:
        self.paths = paths or HostPaths()
        self.interval = interval
        self.page_size = page_size or _page_size()
        self._lock = threading.Lock()
        self._pids: tuple[tuple[int, bytes], ...] = ()  # each pid, with its statm's path
        self._cgroups: tuple[tuple[str, bytes], ...] = ()  # each cgroup's path, with its memory.stat's
        self._procs: dict[int, int] = {}
        self._groups: dict[str, int] = {}
        self._stop = threading.Event()
        self._watching = threading.Event()  # set while it has something to read (or is closing)
        self._thread: threading.Thread | None = None

    def watch(self, pids: Iterable[int], cgroups: Mapping[str, Path]) -> None:
        """What to read from now on: these pids, and these cgroups (path -> the folder of their memory.stat)."""
        statm = tuple((pid, os.fsencode(self.paths.proc / str(pid) / "statm")) for pid in pids)
        stat = tuple((path, os.fsencode(self.paths.cgroup / where / "memory.stat")) for path, where in cgroups.items())
        with self._lock:
            self._pids, self._cgroups = statm, stat
            if self._pids or self._cgroups:
                self._watching.set()
            else:
                self._watching.clear()

    def take(self) -> tuple[dict[int, int], dict[str, int]]:
        """(pid -> highest anonymous bytes, cgroup path -> highest anon + shmem bytes) since the last take."""
        with self._lock:
            procs, groups = self._procs, self._groups
            self._procs, self._groups = {}, {}
        return procs, groups

    def read_once(self) -> None:
        """One round of readings (the thread's loop makes one every ``interval``)."""
        with self._lock:
            pids, cgroups = self._pids, self._cgroups
        procs: dict[int, int] = {}
        for pid, statm_path in pids:
            data = _read(statm_path)  # None: it exited (or its pid is not ours to read)
            if data is not None and (anon := _anon(data, self.page_size)) is not None:
                procs[pid] = anon
        groups: dict[str, int] = {}
        for path, stat_path in cgroups:
            data = _read(stat_path, 64 << 10)
            value = unreclaimable(data.decode("ascii", "replace")) if data is not None else None
            if value is not None:
                groups[path] = value
        with self._lock:
            for pid, v in procs.items():
                if v > self._procs.get(pid, -1):
                    self._procs[pid] = v
            for path, v in groups.items():
                if v > self._groups.get(path, -1):
                    self._groups[path] = v

    def start(self) -> PeakWatch:
        self._thread = threading.Thread(target=self._loop, name="oomwatch-peaks", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._watching.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._watching.wait()  # nothing to read: no wake-ups
            if self._stop.wait(self.interval):
                return
            self.read_once()


def joined(tick: Tick, procs: Mapping[int, int], groups: Mapping[str, int]) -> Tick:
    """``tick`` with what was read between it and the tick before (``PeakWatch.take()``) beside its figures: each
    process read then gets its highest anonymous memory (``anon_peak``), each cgroup its highest anon + shmem
    (``unreclaimable_peak``), the tick's own reading included."""
    if not procs and not groups:
        return tick
    processes = tuple(
        replace(p, anon_peak=max(procs[p.pid], p.anon or 0)) if p.pid in procs else p for p in tick.processes
    )
    cgroups = tuple(
        replace(c, unreclaimable_peak=max(groups[c.path], (c.anon or 0) + (c.shmem or 0))) if c.path in groups else c
        for c in tick.cgroups
    )
    return replace(tick, processes=processes, cgroups=cgroups)


def _read(path: bytes, most: int = 256) -> bytes | None:
    """The first ``most`` bytes of a small /proc or cgroup file (what one read returns; pathlib's read_text took
    three times as long: 20 us a statm against 7.6), or None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, most)
    except OSError:
        return None
    finally:
        os.close(fd)


def _anon(statm: bytes, page_size: int) -> int | None:
    """Resident less shared bytes of a ``/proc/PID/statm`` text (its anonymous memory), None when it says neither."""
    fields = statm.split()
    try:
        resident, shared = int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None
    return max(0, resident - shared) * page_size


def _page_size() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return PAGE_SIZE
