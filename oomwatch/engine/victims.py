"""Who died: victims from kernel reports and from what launchers and orchestrators say.

A kernel report is authoritative for pid, name and sizes. A launcher line (torchrun's
`failed (exitcode: -9) local_rank: 1 (pid: 4242)`) links a pid to a rank; a DataLoader
line names worker pids. Both are merged into the kernel victim with the same pid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from oomwatch.engine.jobshape import table_roles
from oomwatch.engine.model import Event, Evidence, OomReport, Victim
from oomwatch.engine.roles import TRAINING_ROLES, role_for

# event kinds that name a process that was killed (not merely a failure summary)
KILLED_KINDS = (
    "dataloader_worker_killed", "sigkill", "k8s_system_oom", "userspace_oom_kill",
    "k8s_oomkilled", "docker_oomkilled", "shell_killed", "exit_137", "bus_error", "unit_oom_kill",
    "k8s_evicted", "process_died", "crash",
)  # fmt: skip
RANK_KINDS = ("sigkill", "launcher_failure")
_CONTAINER_KINDS = ("k8s_oomkilled", "docker_oomkilled", "unit_oom_kill", "k8s_evicted")
WORKER_KINDS = ("dataloader_worker_killed", "dataloader_worker_exited", "bus_error")


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def pids_in(text: str | None) -> list[int]:
    """'123' or '123, 456' (DataLoader's `pid(s) 123, 456`)."""
    if not text:
        return []
    # a pid has at most 7 digits (pid_max is 2^22); longer runs, or digits of other scripts, are no pid
    return [int(p) for p in text.replace(",", " ").split() if p.isascii() and p.isdigit() and len(p) <= 10]


def _program(command: str | None) -> str | None:
    """A shell prints the killed command line; the process name is its program's basename."""
    if not command or not command.strip():
        return None
    return command.split()[0].rsplit("/", 1)[-1]


def linked_pids(events: Sequence[Event]) -> tuple[dict[int, int | None], set[int]]:
    """Pids that launchers name as ranks (pid -> rank or local rank), and DataLoader workers.
    A global rank beats a local one: a ChildFailedError table gives it in the row just above the
    one with the pid (``rank : 3 (local_rank: 1)``, then ``exitcode : -9 (pid: 12622)``)."""
    ranks: dict[int, int | None] = {}
    global_ranks: dict[int, int] = {}
    workers: set[int] = set()
    above: Event | None = None  # the last rank-kind event, for the table's rank row
    for ev in events:
        if ev.kind in RANK_KINDS:
            rank = _int(ev.fields.get("rank")) if "rank" in ev.fields else None
            if rank is None:
                rank = _int(ev.fields.get("local_rank"))
            pids = pids_in(ev.fields.get("pid"))
            row = _int(above.fields.get("rank")) if above is not None and "pid" not in above.fields else None
            if row is not None and above is not None and "rank" not in ev.fields and _next_row(above, ev):
                global_ranks.update((pid, row) for pid in pids)
            for pid in pids:
                if ranks.get(pid) is None:
                    ranks[pid] = rank
            above = ev
        elif ev.kind in WORKER_KINDS or ev.fields.get("worker") == "dataloader":
            workers.update(pids_in(ev.fields.get("pid")))
    ranks.update(global_ranks)
    return ranks, workers


def _next_row(a: Event, b: Event) -> bool:
    return a.line.file == b.line.file and 0 < b.line.no - a.line.no <= 2


def _hint(ev: Event, name: str) -> bool:
    return ev.kind == "hint" and ev.fields.get("hint") == name


def launched(events: Sequence[Event]) -> bool:
    """A launcher's line is in the inputs (torchrun, deepspeed, mpirun... reporting on its ranks), or
    torch.multiprocessing.spawn's frames (its parent started the ranks: rules hint ``mp_spawn``)."""
    return any((ev.kind in RANK_KINDS and ev.fields.get("launcher")) or _hint(ev, "mp_spawn") for ev in events)


def manager_shown(events: Sequence[Event]) -> bool:
    """The logs show a multiprocessing Manager in the job (managers.py frames, a SyncManager, a
    proxy: rules hint ``mp_manager``)."""
    return any(_hint(ev, "mp_manager") for ev in events)


Known = Mapping[int, tuple[str, int | None]]  # pid -> (role, rank), as the agent saw them live


def build_victims(
    reports: Sequence[OomReport], events: Sequence[Event], known: Mapping[int, tuple[str, int | None]] | None = None
) -> list[Victim]:
    """Victims, training processes first, then in order of appearance; one per pid. ``known`` maps
    pids to (role, rank) seen live by the agent (``oomwatch run``): that beats any guess from names;
    then the roles of the report's task table (engine.jobshape.table_roles)."""
    ranks, workers = linked_pids(events)
    known = known or {}
    seen: set[tuple[str, int]] = set()
    victims = _kernel_victims(reports, events, known, ranks, workers, seen)
    victims += _log_victims(events, known, ranks, workers, seen)
    return _lone_rank(_by_importance(victims), events)


def _kernel_victims(
    reports: Sequence[OomReport],
    events: Sequence[Event],
    known: Known,
    ranks: dict[int, int | None],
    workers: set[int],
    seen: set[tuple[str, int]],
) -> list[Victim]:
    """One victim per pid the kernel's reports killed (``seen`` gets each), with the launchers' lines
    that name it."""
    by_launcher = launched(events)
    manager = manager_shown(events)
    victims: list[Victim] = []
    # each pid's first three lines from launchers and kills, indexed once (per report, every event was read)
    named: dict[int, list[Evidence]] = {}
    for ev in events:
        if ev.kind in KILLED_KINDS + RANK_KINDS:
            for p in dict.fromkeys(pids_in(ev.fields.get("pid"))):
                said = named.setdefault(p, [])
                if len(said) < 3:
                    said.append(ev.evidence)
    for rep in reports:
        # no "Killed process" line (cut off, or grep'd away): the selected process is the best guess
        pid = rep.dead_pid
        if pid is None or ("kernel", pid) in seen:
            continue
        seen.add(("kernel", pid))
        name = rep.dead_name
        extra = tuple(named.get(pid, ()))
        role, rank = table_roles(rep, known, ranks, workers, by_launcher, manager).get(pid, (None, None))
        if role is None:
            role, rank = known[pid] if pid in known else (role_for(name, pid, ranks, workers), ranks.get(pid))
        victims.append(
            Victim(
                pid=pid,
                name=name,
                role=role,
                rank=rank,
                anon_rss_bytes=rep.anon_rss_bytes,
                file_rss_bytes=rep.file_rss_bytes,
                shmem_rss_bytes=rep.shmem_rss_bytes,
                cgroup=rep.task_memcg or rep.oom_memcg,
                evidence=rep.evidence + extra[:3],
                source="kernel",
            )
        )
    return victims


def _log_victims(
    events: Sequence[Event],
    known: Known,
    ranks: dict[int, int | None],
    workers: set[int],
    seen: set[tuple[str, int]],
) -> list[Victim]:
    """The victims that launchers, orchestrators and userspace killers name, but no kernel report
    (``seen`` holds the kernel's)."""
    kernel_pids = {pid for _, pid in seen}
    children = _children(events)
    victims: list[Victim] = []
    for ev in events:
        if ev.kind not in KILLED_KINDS:
            continue
        pids: list[int | None] = [*pids_in(ev.fields.get("pid"))] or [_child_pid(ev, children)]
        for pid in pids:
            if pid in kernel_pids:
                continue
            program = _program(ev.fields.get("name"))
            name = program or ev.fields.get("task") or ev.fields.get("container") or ev.fields.get("pod")
            said_rank = _int(ev.fields.get("rank")) if "rank" in ev.fields else _int(ev.fields.get("local_rank"))
            # a launcher that names only the rank it lost (DeepSpeed's --local_rank=N, mp.spawn's
            # `process N`): that rank is the victim, its pid unknown
            key = (ev.kind, pid if pid is not None else hash(name) if name is not None else hash(("rank", said_rank)))
            if key in seen or (pid is None and name is None and (ev.kind != "sigkill" or said_rank is None)):
                continue
            seen.add(key)
            # a pod or container name is not a process name: its role is unknown, not "other"
            role = role_for(None if ev.kind in _CONTAINER_KINDS else program, pid, ranks, workers)
            if ev.kind == "dataloader_worker_killed":
                role = "dataloader_worker"
            rank = ranks.get(pid) if pid is not None else None
            if rank is None and ev.kind == "sigkill":
                rank = said_rank
                if role == "unknown" and rank is not None:
                    role = "rank"
            if pid is not None and pid in known:
                role, rank = known[pid]
            victims.append(
                Victim(
                    pid=pid,
                    name=name,
                    role=role,
                    rank=rank,
                    anon_rss_bytes=None,
                    file_rss_bytes=None,
                    shmem_rss_bytes=None,
                    cgroup=ev.fields.get("cgroup"),
                    evidence=(ev.evidence,),
                    source=_SOURCES.get(ev.kind, "log"),
                )
            )
    return victims


def _by_importance(victims: list[Victim]) -> list[Victim]:
    order = {id(v): i for i, v in enumerate(victims)}

    def importance(v: Victim) -> tuple[bool, bool, bool, bool, int]:
        # training processes first; a kill that freed no anonymous memory (a sacrificed child)
        # rarely mattered; among kills of an OOM killer (the kernel's, a userspace one: it goes on
        # killing until memory is back) the latest is the one the log ends with, among launcher
        # reports the first failure is the root cause
        # (a killer's line naming only the cgroup it emptied comes after the kill that names the pid)
        latest_first = -order[id(v)] if v.source in _KILLERS else order[id(v)]
        unnamed = v.pid is None and v.source in _KILLERS
        return (v.source != "kernel", v.role not in TRAINING_ROLES, v.anon_rss_bytes == 0, unnamed, latest_first)

    return sorted(victims, key=importance)


_KILLERS = ("kernel", "userspace-oom-killer")
CHILD_NEAR = 3  # lines: a launcher's row naming the failed child's pid, then its kill row
Children = dict[tuple[str, str], list[tuple[int, str, int]]]


def _children(events: Sequence[Event]) -> Children:
    """(file, launcher) -> (line, `child`, pid) of each line where a launcher names one of its children
    (fields `child`, rules/fingerprints/torch_launchers.yaml), in order."""
    out: Children = {}
    for ev in events:
        child, launcher = ev.fields.get("child"), ev.fields.get("launcher")
        pids = pids_in(ev.fields.get("pid"))
        if child in ("failed", "any") and launcher and len(pids) == 1:
            out.setdefault((ev.line.file, launcher), []).append((ev.line.no, child, pids[0]))
    return out


def _child_pid(ev: Event, children: Children) -> int | None:
    """The pid of the child a launcher's kill line without a pid is about, from what the same launcher
    said in that file: the failed child it named just before (MPICH's `PID N RUNNING AT`, `child:
    failed`), else the only child it named at all (DeepSpeed's `Killing subprocess N` for each child,
    `child: any`)."""
    named = children.get((ev.line.file, ev.fields.get("launcher", "")), [])
    near = [pid for no, child, pid in named if child == "failed" and 0 < ev.line.no - no <= CHILD_NEAR]
    if near:
        return near[-1]
    pids = {pid for _, _, pid in named}
    return next(iter(pids)) if len(pids) == 1 else None


def _lone_rank(victims: list[Victim], events: Sequence[Event]) -> list[Victim]:
    """A launcher that names the rank it lost but not its pid (torch.multiprocessing.spawn's `process 1
    terminated with signal SIGKILL`), and one kernel kill of a rank whose number nothing gave: the same
    process: the kernel's victim gets the rank, and the launcher's pid-less victim of that rank goes.
    Any more of either and they cannot be paired. A lost rank that a victim with a pid is (paired
    here, or named by another line) is not listed again without one."""
    lost = {r for ev in events if ev.kind == "sigkill" and not ev.fields.get("pid")
            if (r := _int(ev.fields.get("rank") or ev.fields.get("local_rank"))) is not None}  # fmt: skip
    open_ranks = [i for i, v in enumerate(victims) if v.source == "kernel" and v.role == "rank" and v.rank is None]
    named = {v.rank for v in victims if v.rank is not None and v.pid is not None}
    if len(lost) == 1 and len(open_ranks) == 1 and not lost & named:
        rank, i = next(iter(lost)), open_ranks[0]
        victims[i] = replace(victims[i], rank=rank, evidence=victims[i].evidence + _rank_evidence(victims, rank))
        named.add(rank)
    # a rank some victim with a pid is (paired here, or named by another line) is not listed again without one
    return [v for v in victims if v.pid is not None or v.rank is None or v.rank not in named]


def _rank_evidence(victims: Sequence[Victim], rank: int | None) -> tuple[Evidence, ...]:
    """The lines of the launcher's pid-less victim of ``rank`` (they now belong to the kernel's)."""
    return tuple(e for v in victims if v.pid is None and v.source == "launcher" and v.rank == rank for e in v.evidence)


_SOURCES = {
    "dataloader_worker_killed": "pytorch",
    "sigkill": "launcher",
    "k8s_system_oom": "kubernetes",
    "k8s_oomkilled": "kubernetes",
    "k8s_evicted": "kubernetes",
    "process_died": "log",
    "docker_oomkilled": "docker",
    "userspace_oom_kill": "userspace-oom-killer",
    "shell_killed": "shell",
    "unit_oom_kill": "systemd",
    "bus_error": "pytorch",
    "exit_137": "log",
}
