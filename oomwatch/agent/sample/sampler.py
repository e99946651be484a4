"""One agent tick: processes (status, every tick), smaps_rollup (on the CPU budget), the jobs'
cgroups, the node, GPUs. Each collector is timed and may fail on its own without stopping the others.

``subtree`` limits the processes to one process and its descendants (``oomwatch run``); they all
count as the job ``run-<pid>`` unless discovery found a job for them.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from oomwatch.agent.sample.discovery import Member, classify, kept_managers, kept_spawn_roles, memory_cgroup_path
from oomwatch.agent.sample.gpu import GpuCollector
from oomwatch.agent.sample.jobnames import StableJobs
from oomwatch.agent.sample.memory import CgroupCollector, collect_node
from oomwatch.agent.sample.notices import Notices
from oomwatch.agent.sample.process_roles import ProcInfo, has_rank_env, is_launcher, is_python
from oomwatch.agent.sample.proctable import ProcessTable, Tracked
from oomwatch.agent.sample.pss import OUTSIDE_JOBS, PRIORITY, Candidate, SmapsBudget
from oomwatch.agent.tick import (
    TRAINING_ROLES,
    CgroupSample,
    CollectorResult,
    GpuSample,
    NodeSample,
    ProcessSample,
    Tick,
)
from oomwatch.cgroupfs.detect import MemoryCgroup
from oomwatch.paths import HostPaths
from oomwatch.procfs import ProcessGone
from oomwatch.procfs.io import read_rchar
from oomwatch.procfs.smaps_rollup import read_smaps_rollup

log = logging.getLogger("oomwatch.agent")


class Sampler:
    def __init__(
        self,
        paths: HostPaths | None = None,
        *,
        pss_budget: float = 0.05,
        top_n: int = 20,
        subtree: int | None = None,
        gpu: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = paths or HostPaths()
        self.notices = Notices()
        self.table = ProcessTable(self.paths, self.notices)
        self.budget = SmapsBudget(fraction=pss_budget)
        self.top_n = top_n
        self.subtree = subtree
        self._top_pythons = 0  # run mode: Python processes of the command not started by another Python one
        self.clock = clock
        self.cgroups = CgroupCollector(self.paths, self.notices)
        self.gpu = GpuCollector(self.notices) if gpu else None
        self.members: dict[int, Member] = {}
        self._managers: dict[int, int | None] = {}  # processes seen as managers: pid -> start time
        self._spawned: dict[int, tuple[int | None, str]] = {}  # mp.spawn ranks and parents: pid -> start, role
        self.jobs = StableJobs()  # each process keeps the job it was first known by
        self._results: list[CollectorResult] = []
        self._classified = False
        self.classify_runs = 0  # how often role discovery ran (it runs only on changes that matter)
        self.memory_dirs: dict[str, Path] = {}  # the last tick's cgroups: path -> the folder of their memory files

    def close(self) -> None:
        self.table.close()
        if self.gpu is not None:
            self.gpu.close()

    def reload(self, *, pss_budget: float | None = None, top_n: int | None = None) -> None:
        if pss_budget is not None:
            self.budget.fraction = pss_budget
        if top_n is not None:
            self.top_n = top_n
        self.cgroups.reload()
        for t in self.table.procs.values():
            t.located = False

    @contextmanager
    def _collector(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        except Exception as exc:  # one collector failing must not stop the others
            log.error("collector %s failed: %s", name, exc, exc_info=log.isEnabledFor(logging.DEBUG))
            error = f"{type(exc).__name__}: {exc}"
            self._results.append(CollectorResult(name, False, time.perf_counter() - start, error))
        else:
            self._results.append(CollectorResult(name, True, time.perf_counter() - start))

    def tick(self) -> Tick:
        start = time.perf_counter()
        now, wall = self.clock(), time.time()
        self._results = []
        with self._collector("processes"):
            self.table.update(now)
            changes, self.table.changes = self.table.changes, []
            if not self._classified or any(self._matters(info) for info in changes):
                infos = sorted((t.info for t in self.table.procs.values()), key=lambda i: i.pid)
                members = kept_managers({m.pid: m for m in classify(infos)}, infos, self._managers)
                members = kept_spawn_roles(members, infos, self._spawned)
                self.members = self.jobs.apply(members, {i.pid: i.start_time for i in infos})
                self._classified = True
                self.classify_runs += 1
        scope = self._scope()
        if self.subtree is not None:  # the command's own Python processes (not started by Python)
            self._top_pythons = sum(1 for t in scope if is_python(t.info) and not self._python_parent(t))
        chosen = self._chosen(scope)
        spent_before = self.budget.spent_total
        with self._collector("smaps"):
            self._read_smaps(now, chosen)
        gpus: tuple[GpuSample, ...] = ()
        if self.gpu is not None:
            with self._collector("gpu"):
                gpus, per_pid = self.gpu.collect()
                for pid, t in self.table.procs.items():
                    t.gpu_memory = per_pid.get(pid)
        processes = tuple(self._sample(t) for t in scope)
        cgroups: tuple[CgroupSample, ...] = ()
        with self._collector("cgroups"):
            groups = self._groups(processes)
            self.memory_dirs = {path: where.directory for path, (where, _) in groups.items()}
            cgroups = self.cgroups.collect(groups)
        node: NodeSample | None = None
        with self._collector("node"):
            node = collect_node(self.paths, self.notices)
        return Tick(
            time=wall,
            duration=time.perf_counter() - start,
            processes=processes,
            cgroups=cgroups,
            node=node,
            gpus=gpus,
            collectors=tuple(self._results),
            smaps_spent=self.budget.spent_total - spent_before,
            notices=self.notices.drain(),
        )

    def _matters(self, info: ProcInfo) -> bool:
        """Whether a process that came, went or changed can change anyone's role or job: on a busy
        node shells and tools come and go every second, and none of them can."""
        if is_python(info) or is_launcher(info) or has_rank_env(info):
            return True
        for pid in (info.pid, info.ppid):
            m = self.members.get(pid)
            if m is not None and (m.job is not None or m.role != "other"):
                return True
        return False

    def _scope(self) -> list[Tracked]:
        procs = self.table.procs
        if self.subtree is None:
            return [procs[pid] for pid in sorted(procs)]
        keep = {self.subtree} if self.subtree in procs else set()
        children: dict[int, list[int]] = {}
        for pid, t in procs.items():
            children.setdefault(t.info.ppid, []).append(pid)
        stack = list(keep)
        while stack:
            for child in children.get(stack.pop(), []):
                if child not in keep:
                    keep.add(child)
                    stack.append(child)
        return [procs[pid] for pid in sorted(keep)]

    def _job_role(self, t: Tracked) -> tuple[str | None, str]:
        m = self.members.get(t.info.pid)
        job, role = (m.job, m.role) if m is not None else (None, "other")
        if self.subtree is not None and job is None:
            job = f"run-{self.subtree}"
            if (
                role not in TRAINING_ROLES
                and is_python(t.info)
                and not self._python_parent(t)
                and self._top_pythons == 1
            ):
                # the one Python process the command started (itself, or under its shell) that no rule names:
                # the training process of a single-process job (with two or more, which one is not known)
                role = "rank"
            elif role not in TRAINING_ROLES and t.info.pid == self.subtree:
                role = "unknown"
        return job, role

    def _python_parent(self, t: Tracked) -> bool:
        """Whether ``t``'s parent is a Python process of the run (then ``t`` is its helper, not the trainer)."""
        if t.info.pid == self.subtree:
            return False
        parent = self.table.procs.get(t.info.ppid)
        return parent is not None and is_python(parent.info)

    def _chosen(self, scope: list[Tracked]) -> list[tuple[Tracked, int]]:
        """Processes whose smaps are worth a read, with their priority: job members, then the
        top-N others by RSS. In ``run`` mode, the whole subtree."""
        chosen: list[tuple[Tracked, int]] = []
        others: list[Tracked] = []
        for t in scope:
            if not t.status.vm_rss:
                continue  # kernel threads and zombies have no user memory
            job, role = self._job_role(t)
            if job is not None and (role in TRAINING_ROLES or self.subtree is not None):
                chosen.append((t, PRIORITY.get(role, OUTSIDE_JOBS)))
            else:
                others.append(t)
        others.sort(key=lambda t: -(t.status.vm_rss or 0))
        chosen.extend((t, OUTSIDE_JOBS) for t in others[: self.top_n])
        return chosen

    def _read_smaps(self, now: float, chosen: list[tuple[Tracked, int]]) -> None:
        self.budget.refill(now)
        by_pid = {t.info.pid: t for t, _ in chosen}
        candidates = [Candidate(t.info.pid, prio, t.status.vm_rss, t.smaps_at, t.smaps_cost) for t, prio in chosen]
        for c in self.budget.order(now, candidates):
            if self.budget.tokens <= 0:
                break
            if not self.budget.affordable(c):
                continue
            t = by_pid[c.pid]
            start = time.perf_counter()
            try:
                rollup = read_smaps_rollup(self.paths, c.pid)
            except ProcessGone:
                continue
            except PermissionError:
                self.notices.say(
                    "smaps",
                    f"cannot read /proc/{c.pid}/smaps_rollup: permission denied (other users' and non-dumpable "
                    "processes need root with CAP_SYS_PTRACE); where it is denied, PSS/USS are unknown",
                )
                t.smaps_at, t.smaps_cost = now, 3600.0  # do not retry every tick
                continue
            except OSError:
                continue
            with contextlib.suppress(ProcessGone, OSError):
                t.rchar = read_rchar(self.paths, c.pid)  # what it read, at the same moment
            cost = time.perf_counter() - start
            self.budget.spend(cost, c.rss)
            t.smaps, t.smaps_at, t.smaps_cost, t.smaps_time = rollup, now, cost, time.time()

    def _sample(self, t: Tracked) -> ProcessSample:
        """The process's sample, rebuilt only when what it is made of changed (most processes on a
        node are idle: same status bytes, no new smaps read, same role)."""
        m = self.members.get(t.info.pid)
        job, role = self._job_role(t)
        key = (t.status, t.smaps_time, m, job, role, t.gpu_memory, t.info, t.membership)
        cached = t.cached
        if cached is not None and all(a is b or a == b for a, b in zip(key, cached, strict=False)):
            return cached[-1]  # type: ignore[return-value]
        st, sm = t.status, t.smaps
        sample = ProcessSample(
            pid=t.info.pid,
            ppid=t.info.ppid,
            comm=t.info.comm,
            role=role,
            job=job,
            rank=m.rank if m else None,
            local_rank=m.local_rank if m else None,
            state=st.state,
            rss=st.vm_rss,
            anon=st.rss_anon,
            file=st.rss_file,
            shmem=st.rss_shmem,
            swap=st.vm_swap,
            hwm=st.vm_hwm,
            pss=sm.pss if sm else None,
            uss=sm.uss if sm else None,
            swap_pss=sm.swap_pss if sm else None,
            smaps_time=t.smaps_time if sm else None,
            rchar=t.rchar if sm else None,
            cgroup=memory_cgroup_path(t.membership),
            gpu_memory=t.gpu_memory,
            start_time=t.info.start_time,
        )
        t.cached = (*key, sample)
        return sample

    def _groups(self, processes: tuple[ProcessSample, ...]) -> dict[str, tuple[MemoryCgroup, set[str]]]:
        groups: dict[str, tuple[MemoryCgroup, set[str]]] = {}
        procs = self.table.procs
        for p in processes:
            if p.job is None or (p.role not in TRAINING_ROLES and self.subtree is None):
                continue
            t = procs.get(p.pid)
            if t is None:
                continue
            if not t.located:
                t.location, t.located = self.cgroups.locate(t.membership), True
            found = t.location
            if not isinstance(found, tuple):
                continue
            path, where = found
            groups.setdefault(path, (where, set()))[1].add(p.job)
        return groups
