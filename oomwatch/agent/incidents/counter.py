"""Kills seen only by the OOM-kill counters (no kernel report to read): which job process vanished when a
job's cgroup's count (or the node's) rose; each becomes an unconfirmed incident (see :class:`CounterKills`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from oomwatch.agent.tick import ProcessSample, Tick

if TYPE_CHECKING:
    from oomwatch.agent.incidents.writer import Incidents

PENDING_TICKS = 5  # samples to wait for a counted kill's victim to vanish


class CounterKills:
    """Kills seen only by the counters, for when no kernel report can be read (no /dev/kmsg, no log
    file): a job's cgroup's OOM-kill count rose (or the node's, as the job's limited cgroup vanished
    with it), and a training process of that job vanished then or within a few samples. Each becomes
    an unconfirmed incident: the counter says the kernel killed *someone* there; the vanishing says
    who most likely. Kills outside training jobs' cgroups are not guessed at."""

    def __init__(self, incidents: Incidents) -> None:
        self.incidents = incidents
        self._cgroup_kills: dict[str, int] = {}
        self._node_kills: int | None = None
        self._cgroup_jobs: dict[str, tuple[str, ...]] = {}  # limited cgroups of the last sample
        self._pending: list[list[Any]] = []  # [cgroup path, its jobs, kills not yet blamed, samples left]
        self._previous: dict[int, ProcessSample] = {}

    def observe(self, tick: Tick) -> list[Path | None]:
        """The incidents written for this tick's counted kills (None: counted, not on disk yet)."""
        alive = {p.pid for p in tick.processes}
        now_jobs = {p.pid: p for p in tick.processes if p.in_job}
        # vanished from the process table (not merely out of a job: a trainer whose workers died
        # is no longer a job's member, but it is alive)
        gone = [p for pid, p in self._previous.items() if pid not in alive]
        written: list[Path | None] = []
        blamed: set[int] = set()
        explained = 0
        present = {c.path for c in tick.cgroups}
        for c in tick.cgroups:
            before = self._cgroup_kills.get(c.path)
            if before is not None and c.oom_kills is not None and c.oom_kills > before:
                explained += c.oom_kills - before
                # the victim may still be exiting in this sample: wait for it a few samples
                self._pending.append([c.path, c.jobs, c.oom_kills - before, PENDING_TICKS])
        node = tick.node.oom_kills if tick.node is not None else None
        if node is not None and self._node_kills is not None and node - self._node_kills > explained:
            # kills the cgroups present do not explain: the node's, or a cgroup's that is gone already
            vanished = {job: path for path, jobs in self._cgroup_jobs.items() if path not in present for job in jobs}
            # only there: a lone node count cannot tell a kill of ours from one anywhere else on the node
            suspects = [p for p in gone if p.pid not in blamed and vanished.get(p.job or "") is not None]
            for p in suspects[: node - self._node_kills - explained]:
                blamed.add(p.pid)
                path = vanished[p.job or ""]
                written.append(self.incidents.on_counted_kill(p, path, node - self._node_kills - explained))
        for entry in self._pending:
            path, jobs, count, _ = entry
            for p in [p for p in gone if p.job in jobs and p.pid not in blamed][:count]:
                blamed.add(p.pid)
                entry[2] -= 1
                written.append(self.incidents.on_counted_kill(p, path, count))
            entry[3] -= 1
        self._pending = [e for e in self._pending if e[2] > 0 and e[3] > 0]
        if node is not None:
            self._node_kills = node
        self._cgroup_kills.update({c.path: c.oom_kills for c in tick.cgroups if c.oom_kills is not None})
        self._cgroup_jobs = {c.path: c.jobs for c in tick.cgroups if c.effective_limit}
        # keep the last sample of every job process (one that left its job is still a candidate)
        self._previous = {pid: p for pid, p in {**self._previous, **now_jobs}.items() if pid in alive}
        return written
