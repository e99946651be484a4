"""Pure role rules for live processes: which part of a training job each process is.

Roles (DESIGN.md): ``launcher``, ``rank``, ``dataloader_worker``, ``manager``, ``other``, ``unknown``.
The first rule that matches wins (see :func:`assign_roles`):

1. ``launcher``: torchrun / ``python -m torch.distributed.run`` / ``torch.distributed.launch``, the elastic
   agent (comm ``pt_elastic``), deepspeed (and its ``deepspeed.launcher.launch``), ``accelerate launch``,
   ``lightning run``, ``mpirun`` / ``mpiexec`` / ``srun``.
2. ``dataloader_worker``: comm ``pt_data_worker`` (torch >= 2.1 names its workers so).
3. ``other``: argv mentions ``multiprocessing.resource_tracker`` (Python's tracker of semaphores and
   shared memory segments, started by any use of multiprocessing: no part of the training, and no
   data lives in it); ``manager``: argv mentions ``multiprocessing.managers``.
4. ``rank``: a python child of a launcher.
5. ``rank``: RANK or LOCAL_RANK in the environment, unless the process is a child of a rank that
   inherited the same RANK (then rule 6 decides).
6. A multiprocessing child of a python process (argv holds ``spawn_main`` or ``multiprocessing.forkserver``,
   or the same argv as its parent, which is what ``fork`` leaves):

   - comm ``pt_main_thread`` (torch imported, not renamed to a worker), or two or more siblings started
     by spawn with a plain Python name (torch >= 2.1 names its DataLoader workers ``pt_data_worker``),
     and the parent is no rank: ``rank`` started by ``torch.multiprocessing.spawn``; that parent becomes
     a ``launcher``;
   - else, when a sibling is named ``pt_data_worker`` (so this torch names its workers): ``manager``
     (a ``multiprocessing.Manager()`` server or similar); a just-forked worker may show as manager for
     one tick before it renames itself;
   - else ``dataloader_worker``.

7. A python process that is the parent of workers or managers but matched nothing above (a
   single-process trainer without RANK in its environment): ``rank``, with no rank number — the
   training process itself (the kernel's report calls it ``python`` like its manager).
8. A python process that matched nothing above and started ranks (RANK/LOCAL_RANK in their
   environment) running its own program: ``rank`` — the first rank of a job that re-executes its
   script for the others (Lightning's DDP strategy, ``subprocess.Popen([sys.executable, *sys.argv])``
   with LOCAL_RANK set), whose own RANK is set in-process, after its environment was read.

The names these rules know (comms, launcher programs, sub-commands and modules) are the engine's
vocabulary, declared once in :mod:`oomwatch.engine.roles`.

Everything else is decided by :mod:`oomwatch.agent.sample.discovery` once jobs are known: inside a job a python
process is ``unknown`` and any other ``other``; outside any job, ``other``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from oomwatch.engine.roles import (
    LAUNCHER_COMMS,
    LAUNCHER_MODULES,
    LAUNCHER_PROGRAMS,
    LAUNCHER_SUBCOMMANDS,
    PYTHON_PREFIXES,
    RANK_COMMS,
    WORKER_COMMS,
)

MP_CHILD_MARKERS = ("from multiprocessing.spawn import spawn_main", "multiprocessing.forkserver")
MANAGER_MARKERS = ("multiprocessing.managers",)
TRACKER_MARKERS = ("multiprocessing.resource_tracker",)


@dataclass(frozen=True)
class ProcInfo:
    """What discovery knows of one process; ``env`` holds only the allow-listed keys (procfs.environ)."""

    pid: int
    ppid: int
    comm: str
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cgroup: str | None = None
    start_time: int | None = None


def _base(path: str) -> str:
    """The last component of a path (what PurePosixPath(path).name gives, without its cost: this runs
    for every process whenever the process table changes)."""
    return path.rstrip("/").rpartition("/")[2]


def is_python(p: ProcInfo) -> bool:
    if p.comm in WORKER_COMMS or p.comm in RANK_COMMS or p.comm.lower().startswith(PYTHON_PREFIXES):
        return True
    return bool(p.argv) and _base(p.argv[0]).startswith("python")


def program(argv: Sequence[str]) -> tuple[str | None, str | None, Sequence[str]]:
    """(program name, python ``-m`` module, the arguments after them). ``python /usr/bin/torchrun x``
    gives ``("torchrun", None, ["x"])``; ``python -m torch.distributed.run x`` gives ``(None, "torch...", ["x"])``."""
    if not argv:
        return None, None, ()
    name = _base(argv[0])
    if not name.startswith("python"):
        return name, None, argv[1:]
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-m" and i + 1 < len(argv):
            return None, argv[i + 1], argv[i + 2 :]
        if arg == "-c":
            return None, None, ()
        if arg in ("-W", "-X"):
            i += 2
            continue
        if not arg.startswith("-"):
            return _base(arg), None, argv[i + 1 :]
        i += 1
    return None, None, ()


def is_launcher(p: ProcInfo) -> bool:
    if p.comm in LAUNCHER_COMMS:
        return True
    name, module, rest = program(p.argv)
    if module is not None:
        return module in LAUNCHER_MODULES
    if name in LAUNCHER_PROGRAMS:
        return True
    sub = LAUNCHER_SUBCOMMANDS.get(name or "")
    return sub is not None and sub in rest


def is_mp_child(p: ProcInfo, parent: ProcInfo | None) -> bool:
    """Started by multiprocessing from a python parent: spawn / forkserver argv, or fork's identical argv."""
    if parent is None or not is_python(parent):
        return False
    if any(marker in arg for arg in p.argv for marker in MP_CHILD_MARKERS):
        return True
    return bool(p.argv) and p.argv == parent.argv


def is_spawned(p: ProcInfo) -> bool:
    """Started by multiprocessing's spawn or forkserver (its argv says so), not forked."""
    return any(marker in arg for arg in p.argv for marker in MP_CHILD_MARKERS)


def has_rank_env(p: ProcInfo) -> bool:
    return "RANK" in p.env or "LOCAL_RANK" in p.env


def assign_roles(procs: Sequence[ProcInfo]) -> dict[int, str]:
    """Roles by rules 1-7 above; processes no rule names are absent from the result."""
    by_pid = {p.pid: p for p in procs}
    children: dict[int, list[ProcInfo]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    roles: dict[int, str] = {}
    # of each parent's children, once (not once a child: a rank forks hundreds): how many were started by
    # spawn / forkserver with a plain name, and whether one is named as a DataLoader worker
    broods: dict[int, tuple[int, bool]] = {}

    def brood(ppid: int) -> tuple[int, bool]:
        facts = broods.get(ppid)
        if facts is None:
            siblings = children.get(ppid, [])
            spawned = sum(1 for s in siblings if s.comm not in WORKER_COMMS and is_spawned(s))
            facts = broods[ppid] = (spawned, any(s.comm in WORKER_COMMS for s in siblings))
        return facts

    # Parents first, so that "the parent is a launcher / a rank" is already known for each child.
    for p in _parents_first(procs, children):
        parent = by_pid.get(p.ppid) if p.ppid != p.pid else None  # a torn read may name itself
        parent_role = roles.get(p.ppid)
        inherited = parent is not None and parent_role == "rank" and _same_rank(p, parent)
        if is_launcher(p):
            roles[p.pid] = "launcher"
        elif p.comm in WORKER_COMMS:
            roles[p.pid] = "dataloader_worker"
        elif any(marker in arg for arg in p.argv for marker in TRACKER_MARKERS):
            roles[p.pid] = "other"
        elif any(marker in arg for arg in p.argv for marker in MANAGER_MARKERS):
            roles[p.pid] = "manager"
        elif (parent_role == "launcher" and is_python(p)) or (has_rank_env(p) and not inherited):
            roles[p.pid] = "rank"
        elif parent is not None and is_mp_child(p, parent):
            spawned, named_workers = brood(p.ppid)
            spawn_ranks = is_spawned(p) and spawned >= 2 and not named_workers
            if (p.comm in RANK_COMMS or spawn_ranks) and parent_role != "rank":
                roles[p.pid] = "rank"
                roles[parent.pid] = "launcher"  # torch.multiprocessing.spawn's parent
            elif named_workers:
                roles[p.pid] = "manager"
            else:
                roles[p.pid] = "dataloader_worker"
    for p in procs:
        if p.pid not in roles and is_python(p):
            kids = children.get(p.pid, [])
            helpers = any(roles.get(c.pid) in ("dataloader_worker", "manager") for c in kids)  # rule 7
            reexecuted = any(roles.get(c.pid) == "rank" and has_rank_env(c) and _same_program(c, p) for c in kids)
            if helpers or reexecuted:  # rule 8: its own script re-executed for the other ranks
                roles[p.pid] = "rank"
    return roles


def _same_program(p: ProcInfo, parent: ProcInfo) -> bool:
    """Both run the same script or module with the same arguments (the interpreter's path may differ:
    ``python train.py`` re-executed as ``/usr/bin/python3.11 train.py``)."""
    mine, theirs = program(p.argv), program(parent.argv)
    return (mine[0] is not None or mine[1] is not None) and (mine[0], mine[1], tuple(mine[2])) == (
        theirs[0],
        theirs[1],
        tuple(theirs[2]),
    )


def _same_rank(p: ProcInfo, parent: ProcInfo) -> bool:
    return p.env.get("RANK") == parent.env.get("RANK") and p.env.get("LOCAL_RANK") == parent.env.get("LOCAL_RANK")


def _parents_first(procs: Sequence[ProcInfo], children: Mapping[int, list[ProcInfo]]) -> list[ProcInfo]:
    pids = {p.pid for p in procs}
    order: list[ProcInfo] = []
    stack = sorted((p for p in procs if p.ppid not in pids or p.ppid == p.pid), key=lambda p: -p.pid)
    seen: set[int] = set()
    while stack:
        p = stack.pop()
        if p.pid in seen:
            continue
        seen.add(p.pid)
        order.append(p)
        stack.extend(sorted(children.get(p.pid, []), key=lambda c: -c.pid))
    order.extend(p for p in procs if p.pid not in seen)  # cycles from a torn read: any order
    return order
