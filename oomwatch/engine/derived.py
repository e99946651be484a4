"""Facts that need no hint word: the shape of the job's memory across its processes
(engine.jobshape), over time (engine.growth), what each process was doing (engine.activity) and
the calls in the code that ran (engine.code), each with the evidence lines that show it, by the
name a cause signal gives (``job:ranks``, ``growth``, ``activity:<id>``, ``code:<id>``). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from oomwatch.engine.activity import activity_facts
from oomwatch.engine.code import code_facts, scan_program
from oomwatch.engine.facts import primary_report
from oomwatch.engine.growth import growth_facts, printed_series
from oomwatch.engine.jobshape import job_facts, live_members, table_members, table_roles
from oomwatch.engine.model import Event, Evidence, LiveEvidence, LiveProcess, OomReport, Program, Victim
from oomwatch.engine.rules.ruleset import RuleSet
from oomwatch.engine.scanner import ScanResult
from oomwatch.engine.sizes import human
from oomwatch.engine.victims import launched, linked_pids, manager_shown

PROGRAM_SHARE = 0.1  # a separate program holding this share of the limit counts as one sharing it


@dataclass
class Derived:
    facts: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, list[Evidence]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def derived_facts(
    scans: Sequence[ScanResult],
    rules: RuleSet,
    reports: Sequence[OomReport],
    events: Sequence[Event],
    victims: Sequence[Victim],
    known: Mapping[int, tuple[str, int | None]],
    live: LiveEvidence | None,
    program: Program | None,
) -> Derived:
    out = Derived()
    first = victims[0] if victims else None
    rep = primary_report(reports, first)
    processes = live.processes if live is not None else ()
    outside = []
    capacity = None
    if rep is not None:
        ranks, workers = linked_pids(events)
        roles = table_roles(rep, known, ranks, workers, launched(events), manager_shown(events))
        roles.update({v.pid: (v.role, v.rank) for v in victims if v.source == "kernel" and v.pid in roles})
        outside = table_members(rep, roles)
        capacity = rep.memcg_limit_bytes if rep.constraint == "memcg" else rep.mem_total_bytes
    live_ranks = [p for p in processes if p.role == "rank" and p.peak > 0]
    if len(live_ranks) >= 2 or not outside:
        # a sample can miss the last second before the kill: the table's figure at the kill, when larger
        at_kill = {m.pid: m.private for m in outside if m.pid is not None}
        members = [replace(m, private=max(m.private, at_kill.get(m.pid or -1, 0))) for m in live_members(processes)]
        basis = "agent samples (peak USS) and the kernel's task table at the kill"
    else:
        members, basis = outside, "kernel task table (anonymous RSS)"
    facts, evidence = job_facts(
        members, outside, capacity, first.pid if first else None, rep.trigger_name if rep else None, basis
    )
    out.facts.update(facts)
    out.evidence.update(evidence)

    if live is not None and live.programs and capacity:
        big = [(pid, comm, size) for pid, comm, size in live.programs if size >= PROGRAM_SHARE * capacity]
        out.facts["job.programs"] = len(big)
        out.evidence["job:programs"] = [
            Evidence("agent history", 0, f"pid {pid} ({comm}): a program of its own, {human(size)} anonymous memory")
            for pid, comm, size in sorted(big, key=lambda b: -b[2])[:4]
        ]
    mine = next((p for p in processes if first is not None and p.pid == first.pid), None)
    facts, lines = growth_facts(
        mine, events, first.rank if first else None, live.stall if live else None, live.progress if live else ()
    )
    out.facts.update(facts)
    out.facts["growth.capacity_share"] = _capacity_share(facts.get("growth.bytes"), mine, processes, events, capacity)
    out.evidence["growth"] = lines

    facts, by_activity = activity_facts(scans, rules.activities, rules.streams, victims, rules.steps)
    out.facts.update(facts)
    out.evidence.update({f"activity:{k}": v for k, v in by_activity.items()})

    hits, notes = scan_program(program, rules.code) if program is not None else ([], [])
    out.facts.update(code_facts(hits, rules.code, program))
    for h in hits:
        out.evidence.setdefault(f"code:{h.rule}", []).append(h.evidence)
    out.notes.extend(notes)
    if program is not None and program.files:
        names = ", ".join(f.path for f in program.files[:4]) + (" ..." if len(program.files) > 4 else "")
        out.notes.append(f"code read (local, never sent anywhere): {names}")
    return out


def _capacity_share(
    rise: int | None,
    mine: LiveProcess | None,
    processes: Sequence[LiveProcess],
    events: Sequence[Event],
    capacity: int | None,
) -> float | None:
    """The victim's rise times the processes like it (its role, sampled; else the ranks that printed
    their memory), over the limit (memcg) or MemTotal: the most of the limit that growth can have
    filled, if each of them grew as the victim did. None when the rise or the capacity is unknown."""
    if rise is None or not capacity:
        return None
    if mine is not None:
        alike = sum(1 for p in processes if p.role == mine.role)
    else:
        alike = len({who for _, who in printed_series(events)})
    return round(max(rise, 0) * max(alike, 1) / capacity, 3)
