"""Which of the kernel's OOM kills in the inputs are the job's (pure).

A whole ``dmesg`` of a busy node holds many OOM reports: the job's kill and older kills of other
programs and jobs. The diagnosis is about the kill the job's own lines point to: a pid a launcher,
the DataLoader or a shell names as killed (or that was sampled live), else a kill in the cgroup of
the scheduler job its lines name (Slurm's ``job_N``), else the kill closest in time to the job's
first failure line, else the latest (on a host the job's lines came from, when they say). Kills
that are the same failure as that one stay with it: the same memory cgroup hit its limit, the
victim was in the same cgroup, or the node (or another node of the job) ran out within a minute
of it. Every other kill is set aside: it is listed, never mixed into the victims, the facts or
the causes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from oomwatch.engine.clock import moment
from oomwatch.engine.model import Event, OomReport
from oomwatch.engine.victims import pids_in

__all__ = ["Selection", "select_reports", "inside"]

# event kinds whose pid is a process of the job that died (engine.victims names the same kinds)
NAMING_KINDS = frozenset({
    "dataloader_worker_killed", "dataloader_worker_exited", "sigkill", "launcher_failure", "shell_killed",
    "exit_137", "bus_error", "userspace_oom_kill", "k8s_oomkilled", "docker_oomkilled", "unit_oom_kill",
})  # fmt: skip
NEAR_SECONDS = 600.0  # a launcher reports a rank's death within minutes of the kill
SAME_EPISODE_SECONDS = 60.0  # global OOM kills this close together are one shortage of the node's RAM
_ROOTS = frozenset({"", "/", "/user.slice", "/system.slice", "/kubepods", "/kubepods.slice"})


@dataclass(frozen=True)
class Selection:
    job: tuple[OomReport, ...]  # the job's reports (kills and fragments), in input order
    others: tuple[OomReport, ...]  # the kills set aside, in input order
    how: str = ""  # how the job's kill was found: "pid", "job", "time", "host", "latest"; "" when no choice


def named_pids(events: Iterable[Event]) -> set[int]:
    """Pids the job's own lines name as a process that died (never a kernel line's)."""
    found: set[int] = set()
    for ev in events:
        if ev.kind in NAMING_KINDS and not ev.line.kernel:
            found.update(pids_in(ev.fields.get("pid")))
    return found


def inside(ev: Event, reports: Iterable[OomReport]) -> bool:
    """The event's line is one of these reports' lines."""
    return any(r.file == ev.line.file and r.first_line <= ev.line.no <= r.last_line for r in reports)


def select_reports(reports: Sequence[OomReport], events: Sequence[Event], known: Iterable[int] = ()) -> Selection:
    """``known``: pids of the job seen live (``oomwatch run``, the agent)."""
    kills = [r for r in reports if r.dead_pid is not None]
    if len(kills) <= 1:
        return Selection(tuple(reports), ())
    pids = named_pids(events) | set(known)
    # a task killed with the victim (memory.oom.group) is that kill's too
    anchors = [r for r in kills if r.dead_pid in pids or any(t.pid in pids for t in r.group_killed)]
    how = "pid"
    if not anchors:
        jobs = {ev.fields["job"].split(".")[0].split("_")[0] for ev in events if ev.fields.get("job")}
        anchors = [r for r in kills if jobs & _jobs_of(r)]
        how = "job"
    if not anchors:
        hosts = {h for ev in events if not ev.line.kernel for h in (ev.line.host, ev.fields.get("node")) if h}
        on_host = [r for r in kills if r.host in hosts]
        near = _nearest(on_host or kills, events)
        how = "time" if near is not None else "host" if on_host else "latest"
        anchors = [near if near is not None else _latest(on_host or kills)]
    job = list(anchors)
    grew = True
    while grew:  # chains: a kill close to one that is the job's is the job's
        grew = False
        for r in kills:
            if r not in job and any(_same_failure(r, a) for a in job):
                job.append(r)
                grew = True
    fragments = [r for r in reports if r.dead_pid is None and any(_same_failure(r, a) for a in job)]
    chosen = {id(r) for r in (*job, *fragments)}
    others: list[OomReport] = []
    for r in kills:
        if id(r) not in chosen and not any(_same_kill(r, o) for o in others):
            others.append(r)
    return Selection(job=tuple(r for r in reports if id(r) in chosen), others=tuple(others), how=how)


def _same_kill(r: OomReport, a: OomReport) -> bool:
    """One kill read twice (dmesg and kern.log of one node given together)."""
    return r.dead_pid == a.dead_pid and r.anon_rss_bytes == a.anon_rss_bytes and r.victim_name == a.victim_name


_JOB_DIR = re.compile(r"(?:^|/)job_(\d+)(?=/|$)")  # Slurm's cgroups: /slurm/uid_N/job_N/step_N, .../job_N/step_N


def _jobs_of(r: OomReport) -> set[str]:
    """Scheduler job ids in the kill's cgroup paths."""
    return {m.group(1) for path in (r.oom_memcg, r.task_memcg) if path for m in _JOB_DIR.finditer(path)}


def _nearest(kills: Sequence[OomReport], events: Sequence[Event]) -> OomReport | None:
    """The kill closest in time to the job's own first failure line, when both have times on one
    clock and they are at most ``NEAR_SECONDS`` apart."""
    said = [t for ev in events if ev.kind in NAMING_KINDS and not ev.line.kernel and (t := moment(ev.line.time))]
    if not said:
        return None
    first = min(said, key=lambda t: t[1])
    best: tuple[float, OomReport] | None = None
    for r in kills:
        t = moment(r.time)
        gap = abs(t[1] - first[1]) if t is not None and t[0] == first[0] else None
        if gap is not None and gap <= NEAR_SECONDS and (best is None or gap < best[0]):
            best = (gap, r)
    return best[1] if best is not None else None


def _latest(kills: Sequence[OomReport]) -> OomReport:
    """By time when every kill has one on the same clock, else the last in the inputs."""
    times = [moment(r.time) for r in kills]
    if all(t is not None for t in times) and len({t[0] for t in times if t is not None}) == 1:
        return max(zip(kills, times, strict=True), key=lambda kt: kt[1][1] if kt[1] else 0.0)[0]
    return kills[-1]


def _cgroup(path: str | None) -> str | None:
    return path if path is not None and path.rstrip("/") not in _ROOTS else None


def _same_failure(r: OomReport, a: OomReport) -> bool:
    """Nothing tells the two kills apart: no two cgroups, hosts or kinds of OOM, no times far apart."""
    if _same_kill(r, a):
        return True
    mine, theirs = _cgroup(r.oom_memcg), _cgroup(a.oom_memcg)
    if mine is not None and theirs is not None:
        return mine == theirs  # one cgroup's limit hit again (or a fragment of its report), or two limits
    if _cgroup(r.task_memcg) is not None and r.task_memcg == a.task_memcg:
        return True  # the victims lived in one cgroup
    kinds = {_kind(r), _kind(a)}
    if "memcg" in kinds and "global" in kinds:
        return False
    ta, tr = moment(a.time), moment(r.time)
    if ta is not None and tr is not None and ta[0] == tr[0]:
        return abs(ta[1] - tr[1]) <= SAME_EPISODE_SECONDS  # on two nodes too: a job's nodes ran out together
    if r.host is not None and a.host is not None and r.host != a.host:
        return False
    return r.file == a.file  # no times to tell: one file's kills of one kind are one shortage


def _kind(r: OomReport) -> str | None:
    if r.constraint == "memcg" or r.oom_memcg is not None:
        return "memcg"
    return "global" if r.constraint == "global" else None
