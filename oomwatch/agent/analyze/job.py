"""Live analyzers: what the samples of a job say about the cause, as facts for rules/causes.yaml and
the lines that show them. Pure: history rows in (``ProcessRow``, or anything with the same fields),
:class:`~oomwatch.engine.model.LiveEvidence` out.

- **copy-on-write defeat**: DataLoader workers whose private memory (USS) grew a lot while their
  RSS stayed flat (``history.worker_private_growth_ratio``, ``history.worker_rss_growth_ratio``);
- **per-rank duplication**: ranks of one job each holding a large private set of a like size (peak
  USS at least half the largest rank's: ``history.ranks_similar``, ``history.ranks_uss_bytes``);
- **unbounded growth**: the victim's private memory (USS, when smaps was read at least 3 times;
  else its anonymous memory) grew steadily (least-squares fit: ``history.victim_growth_bytes``,
  ``history.victim_growth_r2``, ``history.victim_growth_basis``);
- **manager growth**: a multiprocessing manager (neither rank nor worker) grew
  (``history.manager_growth_bytes``);
- **swap saturation and memory pressure**: the node's swap nearly full
  (``history.swap_used_ratio``) and tasks stalled waiting for memory, from PSI avg10 of the node or
  the job's cgroups (``history.pressure_some_avg10``, ``history.pressure_full_avg10``, and how long
  "full" stayed high: ``history.pressure_full_seconds``); a stall still on at the victim's last sample
  (``LiveEvidence.stall``): the victim's memory held level in it is left out of its growth, here and in
  engine.growth (the limit held it, not the job).

Every evidence line says which process and the times of the samples it compares. Each analyzer is a module
of this package (``cow``, ``duplication``, ``growth``, ``pressure``), run here in that order (evidence lines are
numbered in it); ``series`` holds what they share.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from oomwatch.agent.analyze.cow import copy_on_write
from oomwatch.agent.analyze.duplication import duplication
from oomwatch.agent.analyze.growth import manager_growth, victim_growth
from oomwatch.agent.analyze.pressure import swap_and_pressure, trailing_stall
from oomwatch.agent.analyze.series import SOURCE, EvidenceMap, Facts, Lines, get, live, series
from oomwatch.engine.model import LiveEvidence
from oomwatch.engine.progress import Count, assemble

__all__ = ["SOURCE", "analyze", "programs", "this_run"]


def analyze(
    rows: Iterable[Any],
    victim_pid: int | None = None,
    *,
    node: Iterable[Any] = (),
    cgroups: Iterable[Any] = (),
    steps: Iterable[Any] = (),
) -> LiveEvidence:
    """``rows``: the job's process rows; ``node``: node rows (swap_total, swap_free, pressure_some,
    pressure_full); ``cgroups``: the job's cgroup rows (path, pressure_some, pressure_full); ``steps``: the
    job's step counter readings (time, rule, name, total, step: the history's step rows), for the growth
    read against the steps (engine.growth)."""
    by_pid = series(rows)
    node, cgroups = list(node), list(cgroups)
    facts: Facts = {}
    evidence: EvidenceMap = {}
    ev = Lines()
    copy_on_write(by_pid.values(), facts, evidence, ev)
    duplication(by_pid.values(), facts, evidence, ev)
    victim = by_pid.get(victim_pid) if victim_pid is not None else None
    stall = trailing_stall(node, cgroups, victim.points[-1][0]) if victim is not None and victim.points else None
    if victim is not None:
        victim_growth(victim, facts, evidence, ev, stall)
    manager_growth(by_pid.values(), facts, evidence, ev)
    swap_and_pressure(node, cgroups, facts, evidence, ev)
    processes = tuple(live(s) for s in by_pid.values())
    return LiveEvidence(facts=facts, evidence=evidence, processes=processes, stall=stall, progress=step_points(steps))


def step_points(rows: Iterable[Any]) -> tuple[tuple[float, int], ...]:
    """The training loop's (time, steps done) from step counter readings (anything with time, rule, name,
    total and step: the history's step rows, a run's), as engine.progress assembles them."""
    got = assemble(
        Count(float(get(r, "time")), get(r, "rule"), get(r, "name"), get(r, "total"), int(get(r, "step"))) for r in rows
    )
    return got.points if got is not None else ()


def this_run(rows: list[Any], victim: int) -> list[Any]:
    """The rows of the processes that lived while the victim did: a job id can come back (a launcher
    that sets the same TORCHELASTIC_RUN_ID every time, a rerun in the same pod), and the ranks of an
    earlier run are not this one's."""
    mine = [float(get(r, "time")) for r in rows if get(r, "pid") == victim]
    if not mine:
        return rows
    start = min(mine)
    last: dict[int, float] = {}
    for r in rows:
        pid, t = get(r, "pid"), float(get(r, "time"))
        last[pid] = max(last.get(pid, t), t)
    return [r for r in rows if last[get(r, "pid")] >= start]


SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "fish", "tini", "dumb-init", "timeout", "env", "nohup", "sudo"})


def programs(samples: Iterable[Any], by_job: bool = False) -> tuple[tuple[int, str, int], ...]:
    """The separate programs among ``samples`` (processes of one memory cgroup: what the kernel's OOM
    killer chose among): those no other sampled process started, shells and wrappers left out (their
    children are the programs), each with its largest anonymous memory seen. ``by_job``: the
    processes of one training job are one program whatever their parents say (a worker that outlived
    its rank by a moment was re-parented, and its last sample shows it)."""
    by_pid: dict[int, Any] = {}
    jobs: dict[str, list[Any]] = {}
    for p in samples:
        job = get(p, "job") if by_job and get(p, "in_job") else None
        if job:
            jobs.setdefault(job, []).append(p)
        else:
            by_pid[get(p, "pid")] = p
    out = [_one_program(members) for members in jobs.values()]
    for pid, p in by_pid.items():
        comm = get(p, "comm") or ""
        if comm in SHELLS:
            continue
        parent, started_by_one = get(p, "ppid"), False
        for _ in range(16):  # up through shells; a torn read's cycle ends here
            if parent not in by_pid:
                break
            if (get(by_pid[parent], "comm") or "") not in SHELLS:
                started_by_one = True
                break
            parent = get(by_pid[parent], "ppid")
        if not started_by_one:
            out.append((pid, comm, int(get(p, "anon") or get(p, "rss") or 0)))
    return tuple(sorted(out))


def _one_program(members: list[Any]) -> tuple[int, str, int]:
    """A job as one program: its first process, and the largest anonymous memory of any of them."""
    first = min(members, key=lambda m: get(m, "pid"))
    return get(first, "pid"), get(first, "comm") or "", max(int(get(m, "anon") or 0) for m in members)
