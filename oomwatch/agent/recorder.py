"""What ``oomwatch run`` recorded of its command: every process seen in its tree (first, last and peak
sizes, recent points for the analyzers), the node's swap and pressure, and how the run ended
(``RunResult``). Pure values: ticks in; read by agent/run.py's diagnosis and by render's outputs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from oomwatch.agent.tick import ProcessSample, Tick
from oomwatch.engine.diagnosis import Diagnosis
from oomwatch.engine.progress import Progress

NODE_COLUMNS = ("time", "swap_total", "swap_free", "pressure_some", "pressure_full")
NODE_POINTS = 3000  # node samples kept for the swap/pressure analyzer: 10 minutes at the default 0.2 s
JOB_CGROUP_SHARE = 0.9  # of the job's memory, the share its own memory cgroup holds at least
TRAIL_POINTS = 1000  # samples of each process (and cgroup) kept for the estimator, thinned evenly past it

_Point = tuple[float, int | None, int | None, int | None, int | None]  # (time, rss, anon, uss, rchar)


@dataclass
class Seen:
    """What the run saw of one process."""

    first: ProcessSample
    last: ProcessSample
    first_time: float
    last_time: float
    peak: dict[str, int] = field(default_factory=dict)
    first_uss: int | None = None
    gone: bool = False
    # the first sample and the recent ones, for the analyzers (what grew, how steadily)
    points: deque[_Point] = field(default_factory=lambda: deque(maxlen=600))
    first_point: _Point | None = None
    held_in: str | None = None  # the memory cgroup it was in when its RSS peaked (an exiting one reads as /)

    def update(self, p: ProcessSample, t: float) -> None:
        self.last, self.last_time = p, t
        point = (t, p.rss, p.anon, p.uss, p.rchar)
        if self.first_point is None:
            self.first_point = point
        self.points.append(point)
        if self.first_uss is None and p.uss is not None:
            self.first_uss = p.uss
        if p.rss is not None and p.rss > self.peak.get("rss", -1):
            self.held_in = p.cgroup
        for attr in ("rss", "anon", "uss", "pss", "swap"):
            v = getattr(p, attr)
            if v is not None and v > self.peak.get(attr, -1):
                self.peak[attr] = v


class Trail:
    """A whole run's samples of one process or cgroup, at most ``TRAIL_POINTS``: the n-th sample is kept when n is
    a multiple of the stride, which doubles (dropping every other kept one) when the trail is full: evenly
    thinned, the run's start kept."""

    def __init__(self) -> None:
        self._kept: list[tuple[int, tuple[Any, ...]]] = []
        self.stride = 1
        self._n = 0

    @property
    def points(self) -> list[tuple[Any, ...]]:
        return [point for _, point in self._kept]

    def add(self, point: tuple[Any, ...]) -> None:
        n, self._n = self._n, self._n + 1
        if n % self.stride:
            return
        self._kept.append((n, point))
        if len(self._kept) >= TRAIL_POINTS:
            self.stride *= 2
            self._kept = [(i, pt) for i, pt in self._kept if i % self.stride == 0]


class Recorder:
    def __init__(self) -> None:
        self.seen: dict[int, Seen] = {}
        # the estimator's input (oomwatch estimate, run --report): every process's and cgroup's sizes over the run
        self.trails: dict[int, Trail] = {}
        self.cgroup_trails: dict[str, Trail] = {}
        self._smaps_read: dict[int, float | None] = {}  # pid -> when the smaps values last put in its trail were read
        self.last_tick: Tick | None = None
        self.peak_gpu: tuple[int, int] | None = None  # (used, total) at the highest use
        # swap and pressure of the node, each tick, the last NODE_POINTS (the analyzers' input)
        self.node: deque[dict[str, Any]] = deque(maxlen=NODE_POINTS)

    def add(self, tick: Tick, peaks: tuple[dict[int, int], dict[str, int]] | None = None) -> None:
        """One tick; ``peaks``: the highest anonymous memory of each pid and anon + shmem of each cgroup read
        between the last tick and this one (agent/peaks.py), kept beside the tick's own figures."""
        procs, groups = peaks or ({}, {})
        alive = set()
        for p in tick.processes:
            alive.add(p.pid)
            s = self.seen.get(p.pid)
            if s is None or s.gone:
                s = self.seen[p.pid] = Seen(p, p, tick.time, tick.time)
            s.update(p, tick.time)
            # a smaps reading goes into the trail once, in the tick that made it (a sample carries it on)
            fresh = p.smaps_time is None or self._smaps_read.get(p.pid) != p.smaps_time
            self._smaps_read[p.pid] = p.smaps_time
            uss, pss, rchar = (p.uss, p.pss, p.rchar) if fresh else (None, None, None)
            top = _highest(procs.get(p.pid), p.anon)
            if top is not None and top > s.peak.get("anon", -1):
                s.peak["anon"] = top
            self.trails.setdefault(p.pid, Trail()).add((tick.time, uss, pss, p.rss, p.anon, p.shmem, rchar, top))
        for c in tick.cgroups:
            now = None if c.anon is None and c.shmem is None else (c.anon or 0) + (c.shmem or 0)
            self.cgroup_trails.setdefault(c.path, Trail()).add(
                (tick.time, c.usage, c.anon, c.shmem, c.file, c.limit, _highest(groups.get(c.path), now))
            )
        for pid, s in self.seen.items():
            if pid not in alive:
                s.gone = True
        for g in tick.gpus:
            if g.used is not None and g.total and (self.peak_gpu is None or g.used > self.peak_gpu[0]):
                self.peak_gpu = (g.used, g.total)
        n = tick.node
        if n is not None:
            psi = n.pressure
            self.node.append({
                "time": tick.time, "resolution": tick.time - self.node[-1]["time"] if self.node else None,
                "swap_total": n.swap_total, "swap_free": n.swap_free,
                "pressure_some": psi.some.avg10 if psi is not None and psi.some is not None else None,
                "pressure_full": psi.full.avg10 if psi is not None and psi.full is not None else None,
            })  # fmt: skip
        self.last_tick = tick

    def peaks(self, alive_with: int | None = None) -> list[dict[str, Any]]:
        """Each process seen (still there in the last second ``alive_with`` was seen, when given),
        with its largest anonymous memory: what separate programs held when it was killed."""
        mine = self.seen.get(alive_with) if alive_with is not None else None
        since = mine.last_time - 1.0 if mine is not None else float("-inf")
        # its first parent: a worker that outlives its rank by a moment is re-parented
        return [{"pid": pid, "ppid": s.first.ppid, "comm": s.last.comm, "anon": s.peak.get("anon")}
                for pid, s in self.seen.items() if s.last_time >= since]  # fmt: skip

    def samples(self) -> dict[str, Any]:
        """The trails as a document: each process (its last role, rank and comm) with its samples, the
        samples of the memory cgroup that held (nearly) all of the job's memory (its own), when there is one,
        and the node's swap and pressure at each tick."""
        processes = [
            {"pid": pid, "role": s.last.role, "rank": s.last.rank, "comm": s.last.comm,
             "points": [list(pt) for pt in self.trails[pid].points]}
            for pid, s in sorted(self.seen.items()) if pid in self.trails
        ]  # fmt: skip
        job = self._job_cgroup()
        cgroup = None
        if job is not None and job in self.cgroup_trails:
            cgroup = {"path": job, "points": [list(pt) for pt in self.cgroup_trails[job].points]}
        return {
            # anon_peak, unreclaimable_peak: the highest since the previous point (read every 20 ms between them)
            "process_columns": ["time", "uss", "pss", "rss", "anon", "shmem", "rchar", "anon_peak"],
            "cgroup_columns": ["time", "usage", "anon", "shmem", "file", "limit", "unreclaimable_peak"],
            "processes": processes,
            "cgroup": cgroup,
            # the node's swap and memory pressure (PSI avg10, percent) at each tick: what the analyzers had
            "node_columns": list(NODE_COLUMNS),
            "node": [[n[c] for c in NODE_COLUMNS] for n in self.node],
        }

    def _job_cgroup(self) -> str | None:
        """The memory cgroup that held (nearly) all of the job's memory: its processes' largest RSS, each where
        it was when it peaked, is there for at least JOB_CGROUP_SHARE of all of theirs (a wrapper's shell that
        moved the job into a cgroup of its own stays where it started; an exiting process reads as in /)."""
        held: dict[str, int] = {}
        for s in self.seen.values():
            if s.held_in is not None:
                held[s.held_in] = held.get(s.held_in, 0) + s.peak.get("rss", 0)
        total = sum(s.peak.get("rss", 0) for s in self.seen.values())
        if not held or total <= 0:
            return None
        path = max(held, key=lambda k: held[k])
        return path if held[path] >= JOB_CGROUP_SHARE * total else None

    def roles(self) -> dict[int, tuple[str, int | None]]:
        return {pid: (s.last.role, s.last.rank) for pid, s in self.seen.items()}

    def rows(self) -> list[dict[str, Any]]:
        """The samples as history rows (the analyzers' input)."""
        out = []
        for pid, s in self.seen.items():
            points = list(s.points)
            if s.first_point is not None and (not points or points[0] != s.first_point):
                points.insert(0, s.first_point)
            for t, rss, anon, uss, rchar in points:
                out.append({"time": t, "pid": pid, "role": s.last.role, "rank": s.last.rank, "comm": s.last.comm,
                            "rss": rss, "anon": anon, "uss": uss, "rchar": rchar})  # fmt: skip
        return out


def _highest(between: int | None, now: int | None) -> int | None:
    """The highest of what was read between ticks and what the tick read."""
    if between is None:
        return now
    return between if now is None else max(between, now)


@dataclass
class RunResult:
    returncode: int
    diagnosis: Diagnosis | None
    recorder: Recorder
    kernel_lines: list[str]
    notes: list[str]
    duration: float
    progress: Progress | None = None  # the training loop's step counter in its output, when it printed one


def exit_status(returncode: int) -> int:
    """A shell's convention: killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode
