"""``oomwatch top``'s rows: the growth of each process over the last minute of ticks (``History``), a job's
processes in tree order and the largest processes outside jobs. Pure: ticks in, values out; the table and
the JSON document are made by :mod:`oomwatch.render.top`.

A worker whose RSS stays flat while its USS climbs is un-sharing its parent's pages (copy-on-write
defeat); ranks with similar large USS are holding one copy of the data each.
"""

from __future__ import annotations

from collections import deque

from oomwatch.agent.tick import ProcessSample, Tick

GROWTH_WINDOW = 60.0  # seconds of samples behind "growth per minute"


class History:
    """Recent (time, rss, uss, pss) per pid, to compute growth per minute."""

    def __init__(self, window: float = GROWTH_WINDOW) -> None:
        self.window = window
        self._by_pid: dict[int, deque[tuple[float, int | None, int | None, int | None]]] = {}

    def add(self, tick: Tick) -> None:
        alive = set()
        for p in tick.processes:
            alive.add(p.pid)
            q = self._by_pid.setdefault(p.pid, deque())
            q.append((tick.time, p.rss, p.uss, p.pss))
            while q and tick.time - q[0][0] > self.window:
                q.popleft()
        for pid in [pid for pid in self._by_pid if pid not in alive]:
            del self._by_pid[pid]

    def per_minute(self, pid: int, field: int) -> float | None:
        """Growth in bytes per minute of field 1 (rss), 2 (uss) or 3 (pss) over the window; None
        without two known values at least a second apart."""
        q = self._by_pid.get(pid)
        if not q:
            return None
        known = [(s[0], s[field]) for s in q if s[field] is not None]
        if len(known) < 2:
            return None
        (t0, v0), (t1, v1) = known[0], known[-1]
        if t1 - t0 < 1.0 or v0 is None or v1 is None:
            return None
        return (v1 - v0) / (t1 - t0) * 60.0


def tree_order(members: list[ProcessSample]) -> list[tuple[int, ProcessSample]]:
    """(depth, process) parents before children; siblings by rank, then pid."""
    pids = {p.pid for p in members}
    children: dict[int, list[ProcessSample]] = {}
    for p in members:
        children.setdefault(p.ppid if p.ppid in pids and p.ppid != p.pid else -1, []).append(p)

    def key(p: ProcessSample) -> tuple[int, int]:
        return (p.rank if p.rank is not None else 1 << 30, p.pid)

    out: list[tuple[int, ProcessSample]] = []
    stack = [(0, p) for p in sorted(children.get(-1, []), key=key, reverse=True)]
    seen: set[int] = set()
    while stack:
        depth, p = stack.pop()
        if p.pid in seen:
            continue
        seen.add(p.pid)
        out.append((depth, p))
        stack.extend((depth + 1, c) for c in sorted(children.get(p.pid, []), key=key, reverse=True))
    out.extend((0, p) for p in members if p.pid not in seen)
    return out


def others_by_rss(tick: Tick) -> list[ProcessSample]:
    """The processes outside training jobs that have a resident size, largest first."""
    return sorted((p for p in tick.processes if not p.in_job and p.rss), key=lambda p: -(p.rss or 0))
