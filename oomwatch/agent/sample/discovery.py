"""Discovery: which processes belong to which training job, and in what role.

:func:`snapshot` reads ``/proc`` (thin, through the procfs readers); :func:`classify` is pure.
Roles come from :mod:`oomwatch.agent.sample.process_roles`. Jobs:

- a *tree* is a process with a training role (launcher, rank, dataloader_worker, manager, or the
  training parent of workers) together with its ancestors and descendants that have one too; its
  root is the topmost of them;
- the tree's job id is the first found, walking its members parents first, of ``TORCHELASTIC_RUN_ID``
  (as is), ``SLURM_JOB_ID`` (``slurm-<id>``), the Kubernetes pod uid in the cgroup path
  (``pod-<uid>``, ``_`` turned into ``-``), else ``tree-<root pid>``; trees with the same id are one job
  (eight srun tasks of one Slurm job, say);
- the other descendants of a tree's members join its job: python ones as ``unknown``, the rest as
  ``other``;
- everything else has no job and the role ``other`` (a lone python without RANK and without workers
  included: nothing tells it is training).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from oomwatch.agent.sample.process_roles import (
    WORKER_COMMS,
    ProcInfo,
    assign_roles,
    is_launcher,
    is_python,
    is_spawned,
)
from oomwatch.paths import HostPaths
from oomwatch.procfs import ProcessGone
from oomwatch.procfs.cgroup import CgroupMembership, read_proc_cgroup
from oomwatch.procfs.cmdline import read_cmdline
from oomwatch.procfs.environ import read_environ
from oomwatch.procfs.stat import read_stat

__all__ = ["Member", "ProcInfo", "cgroup_path", "classify", "kept_managers", "kept_spawn_roles", "pod_uid", "snapshot"]

# cgroupfs driver: /kubepods/burstable/pod1b2c…-…/<container>; systemd driver:
# /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c…_…_….slice/cri-containerd-….scope
_HEX = "[0-9a-fA-F]"
_UUID = rf"{_HEX}{{8}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{4}}[-_]{_HEX}{{12}}"
_POD_UID = re.compile(rf"kubepods.*?pod({_UUID}|{_HEX}{{32}})(?!{_HEX})")  # static pods: 32 hex, no dashes


@dataclass(frozen=True)
class Member:
    pid: int
    role: str
    job: str | None
    rank: int | None  # from RANK; a worker or manager carries the rank it serves
    local_rank: int | None


def _forget_gone(kept: dict[int, Any], started: dict[int, int | None], start_of: Callable[[Any], int | None]) -> None:
    """Drop from ``kept`` (pid -> what was seen of it, its start time by ``start_of``) each process that is gone, or
    whose pid a new process took (another start time)."""
    for pid, seen in list(kept.items()):
        if pid not in started or started[pid] != start_of(seen):
            del kept[pid]


def kept_managers(
    members: dict[int, Member], infos: Sequence[ProcInfo], managers: dict[int, int | None]
) -> dict[int, Member]:
    """A manager stays one: a ``multiprocessing.Manager()`` server is told from a worker only while a sibling
    is named ``pt_data_worker`` (rule 6), and between epochs a job's non-persistent workers are gone. A process
    seen as a manager (``managers``: pid -> its start time, updated here) is still one while its comm is not a
    worker's; a pid reused by a new process (another start time) is not."""
    started = {i.pid: i.start_time for i in infos}
    comms = {i.pid: i.comm for i in infos}
    _forget_gone(managers, started, lambda kept: kept)
    out = dict(members)
    for pid, m in members.items():
        if m.role == "manager":
            managers[pid] = started.get(pid)
        elif pid in managers and m.role == "dataloader_worker" and comms.get(pid) not in WORKER_COMMS:
            out[pid] = dataclasses.replace(m, role="manager")
    return out


# a role rule 6 gave a process of a torch.multiprocessing.spawn job, and the roles it reads as with one spawned
# process alive, or none (as the job ends): the last rank looks like a DataLoader worker, its parent a trainer,
# then nothing (and `oomwatch run` calls the one Python process of its command the trainer)
_SPAWN_FLIPS = {("launcher", "rank"), ("launcher", "other"), ("launcher", "unknown"), ("rank", "dataloader_worker")}


def kept_spawn_roles(
    members: dict[int, Member], infos: Sequence[ProcInfo], seen: dict[int, tuple[int | None, str]]
) -> dict[int, Member]:
    """A torch.multiprocessing.spawn job stays one: rule 6 names its spawned processes ranks and their parent the
    launcher only while two or more are alive, and the one left as the job ends reads as a DataLoader worker of a
    trainer (a run report, which gives each process its last role, named an mp.spawn parent a rank). A process
    seen as a launcher that no argv names (spawn's parent), or as a spawned rank (``seen``: pid -> its start time
    and role, updated here) keeps that role while its start time is the same; a worker torch named stays one."""
    started = {i.pid: i.start_time for i in infos}
    by_pid = {i.pid: i for i in infos}
    _forget_gone(seen, started, lambda kept: kept[0])
    out = dict(members)
    for pid, m in members.items():
        info = by_pid.get(pid)
        if info is None:
            continue
        kept = seen.get(pid)
        if kept is not None and (kept[1], m.role) in _SPAWN_FLIPS and info.comm not in WORKER_COMMS:
            out[pid] = dataclasses.replace(m, role=kept[1])
        elif (m.role == "launcher" and not is_launcher(info)) or (m.role == "rank" and is_spawned(info)):
            seen[pid] = (started.get(pid), m.role)
    return out


def pod_uid(cgroup: str | None) -> str | None:
    """The Kubernetes pod uid in a cgroup path, with ``-`` separators; None outside kubepods."""
    if not cgroup:
        return None
    m = _POD_UID.search(cgroup)
    return m.group(1).replace("_", "-").lower() if m else None


def _own_key(p: ProcInfo) -> tuple[int, str] | None:
    """(priority, job id): an elastic run id first, then the Slurm job, then the pod."""
    if p.env.get("TORCHELASTIC_RUN_ID"):
        return 0, p.env["TORCHELASTIC_RUN_ID"]
    if p.env.get("SLURM_JOB_ID"):
        return 1, f"slurm-{p.env['SLURM_JOB_ID']}"
    uid = pod_uid(p.cgroup)
    return (2, f"pod-{uid}") if uid else None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def classify(procs: Sequence[ProcInfo]) -> list[Member]:
    """One Member per process, in the order given. Pure and deterministic."""
    by_pid = {p.pid: p for p in procs}
    roles = assign_roles(procs)

    def root_of(pid: int) -> int:
        seen = {pid}
        while (ppid := by_pid[pid].ppid) in roles and ppid not in seen:
            seen.add(ppid)
            pid = ppid
        return pid

    trees: dict[int, list[ProcInfo]] = {}
    for p in procs:  # members parents first within a tree: sorted by start time, then pid
        if p.pid in roles:
            trees.setdefault(root_of(p.pid), []).append(p)
    jobs: dict[int, str] = {}
    for root, members in trees.items():
        members.sort(key=lambda m: (m.start_time or 0, m.pid))
        keys = [k for k in (_own_key(m) for m in members) if k is not None]
        best = min(keys, key=lambda k: k[0], default=None)  # min keeps the first of the best kind
        for m in members:
            jobs[m.pid] = best[1] if best is not None else f"tree-{root}"

    out = []
    for p in procs:
        job, role = jobs.get(p.pid), roles.get(p.pid)
        if job is None:
            job = _ancestor_job(p, by_pid, jobs)
        if role is None:
            role = "other" if job is None or not is_python(p) else "unknown"
        ranked = role in ("rank", "dataloader_worker", "manager")
        rank = _int(p.env.get("RANK")) if ranked else None
        local_rank = _int(p.env.get("LOCAL_RANK")) if ranked else None
        out.append(Member(p.pid, role, job, rank, local_rank))
    return _world_of_one(out)


def _world_of_one(members: list[Member]) -> list[Member]:
    """A job of one rank, with DataLoader workers and no launcher, whose environment names no rank
    (``python train.py``): its training process is rank 0 of a world of 1, as ``diagnose`` says from
    the kernel's task table (engine.jobshape.table_roles)."""
    by_job: dict[str, list[Member]] = {}
    for m in members:
        if m.job is not None:
            by_job.setdefault(m.job, []).append(m)
    alone = set()
    for job, ms in by_job.items():
        roles = [m.role for m in ms]
        one = roles.count("rank") == 1 and "dataloader_worker" in roles and "launcher" not in roles
        if one and all(m.rank is None for m in ms):
            alone.add(job)
    return [dataclasses.replace(m, rank=0) if m.job in alone and m.role == "rank" else m for m in members]


def _ancestor_job(p: ProcInfo, by_pid: dict[int, ProcInfo], jobs: dict[int, str]) -> str | None:
    seen = {p.pid}
    pid = p.ppid
    while pid in by_pid and pid not in seen:
        if pid in jobs:
            return jobs[pid]
        seen.add(pid)
        pid = by_pid[pid].ppid
    return None


def cgroup_path(lines: Sequence[CgroupMembership]) -> str | None:
    """The cgroup a process is known by (pod uids are found in it): the v2 path of its
    /proc/PID/cgroup lines, else the v1 memory one, else the first."""
    line = next((m for m in lines if m.hierarchy_id == 0 and not m.controllers), None)
    line = line or next((m for m in lines if "memory" in m.controllers), None) or (lines[0] if lines else None)
    return line.path if line else None


def memory_cgroup_path(lines: Sequence[CgroupMembership]) -> str | None:
    """The path of the cgroup whose memory limit a process is under: its v1 ``memory`` line where that
    controller is mounted on v1 (a hybrid host's v2 line then says ``/`` for every process), else its
    v2 path."""
    line = next((m for m in lines if "memory" in m.controllers), None)
    line = line or next((m for m in lines if m.hierarchy_id == 0 and not m.controllers), None)
    return line.path if line else None


def _cgroup_path(paths: HostPaths, pid: int) -> str | None:
    """:func:`cgroup_path` of /proc/PID/cgroup; None when unreadable."""
    try:
        lines = read_proc_cgroup(paths, pid, errors="replace")
    except (OSError, ProcessGone):
        return None
    return cgroup_path(lines)


def snapshot(paths: HostPaths) -> list[ProcInfo]:
    """Every process visible under ``paths.proc``, sorted by pid. Vanished processes are skipped;
    an unreadable or empty cmdline/environ (kernel thread, zombie, fresh exec, another user's process
    without CAP_SYS_PTRACE) is left empty."""
    out = []
    for name in os.listdir(paths.proc):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            stat = read_stat(paths, pid)
            argv: list[str] = []
            env: dict[str, str] = {}
            with contextlib.suppress(PermissionError, ProcessGone):  # stat proved it was there
                argv = read_cmdline(paths, pid)
            with contextlib.suppress(PermissionError, ProcessGone):  # stat proved it was there
                env = read_environ(paths, pid)
            cgroup = _cgroup_path(paths, pid)
        except ProcessGone:
            continue
        except OSError:  # e.g. ESRCH surfacing as another errno on some kernels: treat as gone
            continue
        out.append(ProcInfo(pid, stat.ppid or 0, stat.comm or "", tuple(argv), env, cgroup, stat.starttime))
    out.sort(key=lambda p: p.pid)
    return out
