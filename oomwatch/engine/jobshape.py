"""The shape of the job's memory across its processes, when memory ran out: what tells the
mechanisms apart without any word of the job's output.

- ranks holding private sets of a like size that fill most of the limit: each holds its own copy
  of the same data (a dataset in memory, a checkpoint loaded on every rank);
- one rank far above the others: work only it does (rank 0 gathering, evaluating, saving);
- a process outside the job (not Python, not a launcher) large in the OOM domain, or the one that
  invoked the OOM killer: another program took the memory.

The processes come from live samples when the agent (or ``oomwatch run``) measured at least two
ranks' USS, else from the kernel report's task table (anonymous RSS where the table has it, else
RSS), with roles from what was seen live, the pids launchers named, and the kernel's names. Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from oomwatch.engine.model import Evidence, LiveProcess, OomReport, TaskRow
from oomwatch.engine.roles import LOGGED_LAUNCHER_COMMS, PYTHON_PREFIXES, role_for, role_phrase
from oomwatch.engine.sizes import human

ALIKE = 0.25  # ranks within ±25% of the ranks' median are alike
HELPER = 0.05  # a Python process under 5% of the largest of its name is a helper, not a rank
DOMINANT = 0.25  # with no launcher and no workers, a Python process 4x the next one is the job's
SHAPE_FACTS = (
    "job.basis", "job.ranks", "job.ranks_alike", "job.ranks_alike_bytes", "job.ranks_share", "job.top_rank",
    "job.top_rank_ratio", "job.top_rank_is_victim", "job.outsider_name", "job.outsider_bytes",
    "job.outsider_share", "job.trigger_name", "job.trigger_outside", "job.trigger_share", "job.programs",
)  # fmt: skip


@dataclass(frozen=True)
class Member:
    pid: int | None
    name: str
    role: str
    rank: int | None
    private: int  # bytes
    evidence: Evidence


def _pythonish(name: str) -> bool:
    return name.lower().startswith(PYTHON_PREFIXES)


def _private(row: TaskRow) -> int:
    if row.anon_rss_bytes is not None:
        return row.anon_rss_bytes
    if row.rss_bytes is not None:
        return row.rss_bytes
    return (row.file_rss_bytes or 0) + (row.shmem_rss_bytes or 0)


def table_roles(
    rep: OomReport,
    known: Mapping[int, tuple[str, int | None]],
    rank_pids: Mapping[int, int | None],
    worker_pids: set[int],
    launched: bool,
    manager: bool = False,
) -> dict[int, tuple[str, int | None]]:
    """(role, rank) of every row of the report's task table. Beyond what was seen live, what
    launchers named and the kernel's names (engine.roles): with a launcher in the job (a row, a
    launcher's line, or a rank named), the Python processes of its ranks' name are ranks; without
    one, the training process of a single-process job is its workers' parent (its first Python
    process), rank 0 of a world of 1, or the only Python process, or one four times the next (a rank
    whose number nothing gave). Beside a workers' parent, another Python process of its name that is
    no helper is the ``manager`` when the logs show a multiprocessing Manager (``manager``:
    managers.py frames, a SyncManager, a proxy), else unknown."""
    roles: dict[int, tuple[str, int | None]] = {}
    open_rows: list[TaskRow] = []
    for row in rep.tasks:
        if row.pid in known:
            roles[row.pid] = known[row.pid]
            continue
        role = role_for(row.name, row.pid, rank_pids, worker_pids)
        if role == "unknown":
            open_rows.append(row)
        else:
            roles[row.pid] = (role, rank_pids.get(row.pid) if role == "rank" else None)
    if not open_rows:
        return roles
    seen = [r for r, _ in roles.values()]
    if launched or "launcher" in seen or "rank" in seen:
        ranked = [row.name for row in rep.tasks if roles.get(row.pid, ("",))[0] == "rank"]
        name = Counter(ranked or [row.name for row in open_rows]).most_common(1)[0][0]
        mine = [row for row in open_rows if row.name == name]
        biggest = max((_private(row) for row in mine), default=0)
        if "launcher" not in seen and len(mine) >= 3:
            # a Python launcher (torch.multiprocessing.spawn, torch.distributed.launch) started the
            # others: the first of them
            first = min(mine, key=lambda r: r.pid)
            roles[first.pid] = ("launcher", None)
            mine.remove(first)
        for row in open_rows:
            helper = row not in mine or _private(row) < HELPER * biggest  # a resource tracker, a shell's python
            roles.setdefault(row.pid, ("unknown", None) if helper else ("rank", None))
        return roles
    big = sorted((row for row in open_rows if _private(row) > 0), key=_private, reverse=True)
    had_workers = "dataloader_worker" in seen and bool(big)
    if had_workers:
        main: TaskRow | None = min(big, key=lambda r: r.pid)  # the workers' parent: started first
    elif big and (len(big) == 1 or _private(big[1]) < DOMINANT * _private(big[0])):
        main = big[0]  # by far the largest Python process: the job's (a pty driver, a tracker beside it)
    else:
        main = None
    biggest = _private(big[0]) if big else 0
    for row in open_rows:
        if row is main:
            roles[row.pid] = ("rank", 0 if had_workers else None)
        elif manager and had_workers and main is not None and row.name == main.name and row.pid > main.pid and (
            _private(row) >= HELPER * biggest
        ):  # fmt: skip
            roles[row.pid] = ("manager", None)  # started by the training process, serving it and its workers
        else:
            roles[row.pid] = ("unknown", None)
    return roles


def table_members(rep: OomReport, roles: Mapping[int, tuple[str, int | None]]) -> list[Member]:
    out = []
    for row in rep.tasks:
        role, rank = roles.get(row.pid, ("unknown", None))
        if not _pythonish(row.name) and role in ("unknown", "other") and row.name not in LOGGED_LAUNCHER_COMMS:
            role = "other"
        out.append(Member(row.pid, row.name, role, rank, _private(row), Evidence(rep.file, row.line, row.text)))
    return out


def live_members(processes: Sequence[LiveProcess]) -> list[Member]:
    out = []
    for p in processes:
        text = f"pid {p.pid} ({p.comm}, {role_phrase(p.role, p.rank)}): {p.basis} {human(p.peak)} at its peak"
        out.append(Member(p.pid, p.comm, p.role, p.rank, p.peak, Evidence("agent history", 0, text)))
    return out


def job_facts(
    members: Sequence[Member],
    outside: Sequence[Member],
    capacity: int | None,
    victim_pid: int | None,
    trigger: str | None,
    basis: str,
) -> tuple[dict[str, Any], dict[str, list[Evidence]]]:
    """``members``: the processes whose ranks are compared (live or the table); ``outside``: the
    table's rows, for what is not the job's; ``capacity``: the limit (memcg) or MemTotal."""
    facts: dict[str, Any] = dict.fromkeys(SHAPE_FACTS)
    evidence: dict[str, list[Evidence]] = {}
    facts["job.basis"] = basis
    ranks = [m for m in members if m.role == "rank" and m.private > 0]
    facts["job.ranks"] = len(ranks)
    if len(ranks) >= 2:
        mid = median(m.private for m in ranks)
        alike = [m for m in ranks if abs(m.private - mid) <= ALIKE * mid]
        facts["job.ranks_alike"] = len(alike) if len(alike) >= 2 else 0
        facts["job.ranks_alike_bytes"] = int(mid)
        if capacity:
            facts["job.ranks_share"] = round(sum(m.private for m in alike) / capacity, 3)
        if len(alike) >= 2:
            evidence["job:ranks"] = [m.evidence for m in sorted(alike, key=lambda m: -m.private)[:4]]
        top = max(ranks, key=lambda m: m.private)
        others = [m.private for m in ranks if m is not top]
        if median(others) > 0:
            facts["job.top_rank_ratio"] = round(top.private / median(others), 2)
            facts["job.top_rank"] = top.rank
            facts["job.top_rank_is_victim"] = top.pid == victim_pid if victim_pid is not None else None
            peer = min((m for m in ranks if m is not top), key=lambda m: abs(m.private - median(others)))
            evidence["job:top_rank"] = [top.evidence, peer.evidence]
    strangers = [m for m in outside if m.role == "other" and m.private > 0]
    total = sum(m.private for m in outside) or None
    if strangers:
        big = max(strangers, key=lambda m: m.private)
        facts["job.outsider_name"] = big.name
        facts["job.outsider_bytes"] = big.private
        facts["job.outsider_share"] = round(big.private / (capacity or total or 1), 3)
        evidence["job:outsider"] = [big.evidence]
    if trigger:
        facts["job.trigger_name"] = trigger
        facts["job.trigger_outside"] = not _pythonish(trigger) and trigger not in LOGGED_LAUNCHER_COMMS
        named = [m for m in outside if m.name == trigger]
        if len({m.pid for m in named}) == 1:
            facts["job.trigger_share"] = round(named[0].private / (capacity or total or 1), 3)
            if facts["job.trigger_outside"]:
                evidence.setdefault("job:outsider", []).append(named[0].evidence)
    return facts, evidence
