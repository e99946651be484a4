"""What an incident needs that is gone by the time a kill is read, gathered while jobs run: each job
process's last sample (also of gone ones, for ``window`` seconds), the samples of large Python processes of
no job (loners), where each job's output goes and what code it runs (located through its launchers and
ranks and the processes that may read their pipes), and the latest ticks' node and cgroups; and, for one
kill, the victim's cgroup mates, the job's output, its code and its history. The base of
:class:`~oomwatch.agent.incidents.writer.Incidents`, which holds the lock it shares."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oomwatch.agent.analyze.job import this_run
from oomwatch.agent.incidents.joboutput import JobOutput, OutputFile, job_outputs, locate_outputs
from oomwatch.agent.sample import jobcode
from oomwatch.agent.tick import ProcessSample, Tick
from oomwatch.engine.model import Program
from oomwatch.engine.roles import PYTHON_PREFIXES

if TYPE_CHECKING:
    from oomwatch.agent.history.store import HistoryStore

log = logging.getLogger("oomwatch.agent")

WINDOW = 300.0  # seconds of history put into an incident, and of gone processes remembered
SOLO_POINTS = 600  # samples kept of each large Python process of no job
LONER_RSS = 64 << 20  # a Python process of no job this large has its output and code located too
MAX_NEIGHBOURS = 64  # processes looked at for the reader of a job's pipe (each of its log writers)
ANCESTORS = 4  # generations above a log writer where its pipe's reader may be
TICKS_KEPT = 32  # ticks' node and cgroups kept: memory as it was in the seconds before a kill (agent.sigkills)


class Gatherer:
    """The samples, locations and ticks kept for the next kill, and their reading for one."""

    lock: threading.Lock  # the incidents' one lock (created by Incidents): observe runs in the sampler's thread

    def __init__(self, proc: Path, history: HistoryStore | None, window: float, read_code: bool) -> None:
        self.proc = proc
        self.history = history
        self.window = window
        self.seen: dict[int, tuple[float, ProcessSample]] = {}  # pid -> (last seen, last sample)
        self.last_tick: Tick | None = None
        self.ticks: deque[Tick] = deque(maxlen=TICKS_KEPT)  # the latest ticks without processes, newest last
        self._reported: dict[int, float] = {}  # pid -> when an incident for it was started (recent ones)
        # job -> where its output goes and what code it runs, found while it runs
        self._located: dict[str, _Located] = {}
        self._solo: dict[int, deque[dict[str, Any]]] = {}  # large Python processes of no job: their samples
        self.read_code = read_code  # read the job's script for the code rules (the config's read_code)

    def observe(self, tick: Tick) -> None:
        """Remember every job process's latest sample, and gone ones for ``window`` seconds: the
        victim is gone by the time its report is read."""
        loners = _loners(tick)
        with self.lock:
            for p in tick.processes:
                if not (p.in_job or p.pid in loners):
                    continue
                prev = self.seen.get(p.pid)
                if prev is not None and (p.state == "Z" or (p.rss is None and prev[1].rss is not None)):
                    # a zombie's, or an exiting process's (its memory released, its cgroup the root's), has no
                    # memory and no cgroup any more: the last live sample stays
                    continue
                if prev is not None and prev[1].in_job and p.job in (None, f"tree-{p.pid}") and p.job != prev[1].job:
                    # a process keeps the job it was seen in: a worker orphaned by its rank's kill makes a
                    # "job" of its own in the next sample, or none (a large orphan is then a loner, and
                    # would count as a program of its own sharing the limit), but it was that rank's
                    p = dataclasses.replace(p, job=prev[1].job, role=prev[1].role, rank=prev[1].rank)
                self.seen[p.pid] = (tick.time, p)
            for pid, p in loners.items():  # the history keeps jobs' processes only: theirs is kept here
                self._solo.setdefault(pid, deque(maxlen=SOLO_POINTS)).append({**asdict(p), "time": tick.time})
            for pid in [pid for pid, rows in self._solo.items() if tick.time - rows[-1]["time"] > self.window]:
                del self._solo[pid]
            stale = [pid for pid, (t, _) in self.seen.items() if tick.time - t > self.window]
            for pid in stale:
                del self.seen[pid]
            for pid in [pid for pid, t in self._reported.items() if tick.time - t > self.window]:
                del self._reported[pid]
            self.last_tick = tick
            # their node and cgroups (what memory_short reads): the processes would be 10 MB at 1000 of them
            self.ticks.append(dataclasses.replace(tick, processes=()))
            for job in [j for j, loc in self._located.items() if tick.time - loc.time > self.window]:
                del self._located[job]  # a job gone for a while (kept until then: its kill is handled later)
            known = dict(self._located)
        located = {}
        jobs = {**tick.jobs(), **{solo_job(pid): [p] for pid, p in loners.items()}}
        for job, members in jobs.items():
            # where the job's output goes and what it runs, found while it runs (a few descriptors and
            # links of its launcher and ranks, again only when those processes change)
            ordered = _log_writers(members)
            writers = frozenset(ordered)
            before = known.get(job)
            if before is not None and before.writers == writers:
                located[job] = _Located(writers, before.files, before.code, tick.time)
                continue
            code = jobcode.locate_code(ordered, self.proc) if self.read_code else None
            near, up = _neighbours(tick, ordered)
            located[job] = _Located(writers, locate_outputs(ordered, self.proc, near, up), code, tick.time)
        with self.lock:
            self._located.update(located)

    def outputs_located(self) -> dict[str, list[OutputFile]]:
        """Each job's output files as located while it runs (a job gone for ``window`` seconds is dropped)."""
        with self.lock:
            return {job: list(loc.files) for job, loc in self._located.items() if loc.files}

    def ticks_since(self, since: float) -> list[Tick]:
        """The ticks kept from wall-clock time ``since`` on, newest first (their node and cgroups only)."""
        with self.lock:
            return [t for t in reversed(self.ticks) if t.time >= since]

    def last_sample(self, pid: int) -> ProcessSample | None:
        """The latest sample of a job process seen in the last ``window`` seconds (also a gone one)."""
        with self.lock:
            seen = self.seen.get(pid)
        return seen[1] if seen is not None else None

    def reported(self, pid: int) -> bool:
        """Whether an incident for ``pid`` was started recently (from the kernel's report or the counters)."""
        with self.lock:
            return pid in self._reported

    def _report(self, pid: int) -> None:
        with self.lock:
            self._reported[pid] = time.time()

    def _cgroup_mates(self, pid: int) -> list[ProcessSample]:
        """The processes seen lately in the victim's memory cgroup (jobs' and large Python ones)."""
        with self.lock:
            last, victim = self.seen.get(pid, (0.0, None))
            if victim is None or victim.cgroup is None:
                return []
            # alive with it: a program that ended earlier (a preparation step) did not share the limit
            return [s for t, s in self.seen.values() if s.cgroup == victim.cgroup and t >= last - 1.0]

    def _job_outputs(self, job: str | None, victim: int) -> list[JobOutput]:
        """The job's stdout/stderr files, read through its other processes seen lately, launchers and
        ranks first (their output is the job's log)."""
        if job is None:
            return []
        with self.lock:
            members = [s for _, s in self.seen.values() if s.job == job and s.pid != victim]
            known = self._located[job].files if job in self._located else []
            tick = self.last_tick
        writers = _log_writers(members)
        near, up = _neighbours(tick, writers) if tick is not None else ({}, {})
        return job_outputs(writers, self.proc, known, near, up)

    def _job_code(self, job: str | None) -> Program | None:
        """The code the job runs, as located while it ran, read now."""
        if job is None or not self.read_code:
            return None
        with self.lock:
            ref = self._located[job].code if job in self._located else None
        return jobcode.read_code(ref)

    def _history(self, job: str | None, pid: int, now: float) -> tuple[dict[str, Any], _Rows]:
        """(the history put into the incident, the rows for the analyzers)."""
        with self.lock:
            solo = list(self._solo.get(pid, ())) if job is None else []
        if solo:
            source = f"the agent's last {len(solo)} samples of this process (of no job: not in the history store)"
            return {"source": source, "processes": solo, "cgroups": [], "node": []}, _Rows(solo)
        if self.history is None:
            with self.lock:
                last = [asdict(s) for _, s in self.seen.values() if job is not None and s.job == job]
            return {"source": "last samples (no history store)", "processes": last, "cgroups": [], "node": []}, _Rows()
        since = now - self.window
        try:
            procs = (
                self.history.processes(job=job, since=since) if job else self.history.processes(pid=pid, since=since)
            )
            cgroups = self.history.cgroups(since=since)
            node = self.history.node(since=since)
            steps = self.history.steps(job=job, since=since) if job else []
        except Exception as exc:  # the history is evidence, not a requirement
            log.error("reading the history for the incident failed: %s", exc)
            return {"source": f"history unreadable: {exc}", "processes": [], "cgroups": [], "node": []}, _Rows()
        # only the victim's job's cgroups (a victim of no known job: none, rather than every cgroup)
        cgroups = [c for c in cgroups if job and job in (c.jobs or "").split(",")]
        procs = this_run(procs, pid)
        doc = {
            "source": f"history, last {self.window:g} s",
            "processes": [asdict(r) for r in procs],
            "cgroups": [asdict(c) for c in cgroups],
            "node": [asdict(n) for n in node],
            "steps": [asdict(r) for r in steps],
        }
        return doc, _Rows(list(procs), list(node), cgroups, list(steps))


def solo_job(pid: int) -> str:
    """The key under which a Python process of no job keeps its output files and code."""
    return f"solo-{pid}"


def _loners(tick: Tick) -> dict[int, ProcessSample]:
    """Python processes of no job, started by no Python process, that hold LONER_RSS or more: a
    single-process trainer is one (nothing in it says so: no RANK, no workers)."""
    comms = {p.pid: p.comm for p in tick.processes}
    return {
        p.pid: p for p in tick.processes
        if not p.in_job and (p.rss or 0) >= LONER_RSS and _pythonish(p.comm) and not _pythonish(comms.get(p.ppid, ""))
    }  # fmt: skip


def _pythonish(comm: str) -> bool:
    return comm.lower().startswith(PYTHON_PREFIXES)


def _log_writers(members: list[ProcessSample]) -> list[int]:
    """The processes whose stdout/stderr is the job's log: its launchers and ranks; without those, the
    first few of the rest, parents before workers (workers come and go each epoch)."""
    order = {"launcher": 0, "rank": 1, "unknown": 2}
    ranked = sorted(members, key=lambda s: (order.get(s.role, 3), s.rank or 0, s.pid))
    leading = [s.pid for s in ranked if s.role in ("launcher", "rank")]
    return leading or [s.pid for s in ranked[:4]]


@dataclass(frozen=True)
class _Located:
    """A job's output files and code, found through ``writers`` (its launchers and ranks) at ``time``."""

    writers: frozenset[int]
    files: list[OutputFile]
    code: jobcode.CodeRef | None
    time: float


def _neighbours(tick: Tick, pids: list[int]) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Who may read a pipe each of ``pids`` writes: its ancestors (up to ANCESTORS) and their children
    — a sibling (`python train.py | tee log`), an uncle (`torchrun ... | tee log`: the ranks inherit the
    launcher's pipe), slurmstepd or a container shim above; at most MAX_NEIGHBOURS each. Returned
    with each pid's ancestors."""
    parents = {p.pid: p.ppid for p in tick.processes}
    up: dict[int, list[int]] = {}
    for pid in pids:
        chain: list[int] = []
        at = pid
        while at in parents and len(chain) < ANCESTORS and parents[at] not in chain:
            at = parents[at]
            chain.append(at)
        up[pid] = chain
    wanted = {a for chain in up.values() for a in chain}
    children: dict[int, list[int]] = {a: [] for a in wanted}
    for p in tick.processes:
        kids = children.get(p.ppid)
        if kids is not None and len(kids) < MAX_NEIGHBOURS:
            kids.append(p.pid)
    out = {}
    for pid, chain in up.items():
        near = list(chain)
        for a in chain:
            near.extend(c for c in children[a] if c not in near)
        out[pid] = near[:MAX_NEIGHBOURS]
    return out, up


@dataclass
class _Rows:
    """History rows for the analyzers."""

    processes: list[Any] = field(default_factory=list)
    node: list[Any] = field(default_factory=list)
    cgroups: list[Any] = field(default_factory=list)
    steps: list[Any] = field(default_factory=list)  # the job's step counter rows
