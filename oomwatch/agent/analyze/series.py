"""A job's samples as one series per process, and what every analyzer shares: the source and numbering of the
evidence lines, how a process and a time are named in them, and the spans worth comparing.

Rows are ``history.schema.ProcessRow`` or anything with the same fields (live samples, or mappings).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oomwatch.engine.model import Evidence, LiveProcess
from oomwatch.engine.roles import role_phrase

SOURCE = "agent history"
MIB = 1 << 20
# seconds between the first and last of at least three samples compared (the 2x thresholds and the
# 32 MiB of growth in the rules guard the rest): a test's workers live half a second, sampled every 0.1 s
MIN_SPAN = 0.2

Facts = dict[str, Any]
EvidenceMap = dict[str, tuple[Evidence, ...]]


@dataclass
class Series:
    pid: int
    role: str
    rank: int | None
    comm: str
    # (time, rss, anon, uss, rchar, shmem)
    points: list[tuple[float, int | None, int | None, int | None, int | None, int | None]]

    def known(self, i: int) -> list[tuple[float, int]]:
        """(time, value) where field ``i`` (1 rss, 2 anon, 3 uss, 4 rchar, 5 shmem) is known."""
        out: list[tuple[float, int]] = []
        for p in self.points:
            v = p[i]
            if isinstance(v, int):
                out.append((p[0], v))
        return out


class Lines:
    """Evidence lines numbered in the order the analyzers give them."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, text: str) -> Evidence:
        self.count += 1
        return Evidence(SOURCE, self.count, text)


def get(row: Any, key: str) -> Any:
    return row.get(key) if isinstance(row, Mapping) else getattr(row, key, None)


def series(rows: Iterable[Any]) -> dict[int, Series]:
    out: dict[int, Series] = {}
    read_at: dict[int, Any] = {}
    for r in sorted(rows, key=lambda r: float(get(r, "time"))):
        pid = get(r, "pid")
        s = out.get(pid)
        if s is None:
            s = out[pid] = Series(pid, get(r, "role") or "unknown", get(r, "rank"), get(r, "comm") or "", [])
        role = get(r, "role")
        if role and role != "unknown":  # its latest known role: a dying process's last sample says "unknown"
            s.role = role
        s.rank = get(r, "rank") if get(r, "rank") is not None else s.rank
        uss, rchar = get(r, "uss"), get(r, "rchar")
        smaps_time = get(r, "smaps_time")  # live samples carry it (stored rows hold each reading once)
        if smaps_time is not None:
            if read_at.get(pid) == smaps_time:
                uss = rchar = None  # the same reading carried on to this sample: not a new measurement
            read_at[pid] = smaps_time
        s.points.append((float(get(r, "time")), get(r, "rss"), get(r, "anon"), uss, rchar, get(r, "shmem")))
    for s in out.values():
        s.points.sort(key=lambda p: p[0])
    return out


def clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 10) % 10}"


def who(s: Series) -> str:
    return f"pid {s.pid} ({s.comm}, {role_phrase(s.role, s.rank)})"


def spans(points: list[tuple[float, int]]) -> bool:
    """At least three samples over MIN_SPAN seconds: enough to compare."""
    return len(points) >= 3 and points[-1][0] - points[0][0] >= MIN_SPAN


def private(s: Series) -> tuple[str, list[tuple[float, int]], int]:
    """(basis, its private memory over time, how many of those values were estimated). With smaps read
    at least 3 times over MIN_SPAN: USS at each read and, at the samples between reads (the smaps
    budget skips processes on a busy node), the latest read's USS plus how much its anonymous memory
    moved since (a new allocation is private; before the first read, from the first read back). Else
    its anonymous memory, which for a forked worker starts with what it still shares with its parent.
    Each value at most its anonymous + shmem memory then: USS also counts the file pages only this process
    maps (a memory-mapped file it reads, its own libraries), page cache that a limit trades for the
    anonymous memory that grows, so that a climb would seem to hold level as the limit nears."""
    uss, anon = s.known(3), s.known(2)
    if not spans(uss):
        return "anonymous", anon, 0
    read: tuple[int, int] | None = None  # (USS, anonymous) at the latest read with both
    first = next(((p[3], p[2]) for p in s.points if isinstance(p[3], int) and isinstance(p[2], int)), None)
    out: list[tuple[float, int]] = []
    estimated = 0
    for t, _, a, u, _, shmem in s.points:
        held = a + (shmem or 0) if isinstance(a, int) else None
        if isinstance(u, int):
            out.append((t, min(u, held) if held is not None else u))
            if isinstance(a, int):
                read = (u, a)
        elif isinstance(a, int) and (base := read or first) is not None:
            value = max(0, base[0] + a - base[1])
            out.append((t, min(value, held) if held is not None else value))
            estimated += 1
    return "USS", out, estimated


def live(s: Series) -> LiveProcess:
    """A process's private memory over time for the engine (``private``)."""
    basis, points, estimated = private(s)
    return LiveProcess(s.pid, s.comm, s.role, s.rank, basis, tuple(points), tuple(s.known(4)), estimated)
