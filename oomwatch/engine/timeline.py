"""Which rank or node failed first, and which failed because of it. Pure.

The inputs of a job of many ranks or nodes (per-pod ``kubectl logs``, Slurm per-node outputs, torchrun
logs, a combined log, the kernel's log) hold one failure that started it and many that followed: peers
whose connection was reset, watchdog timeouts, ranks their launcher stopped, launchers' summaries. The
events of the kinds ``rules/events.yaml`` lists under ``failures`` become *records*; the records of one
process (the same pid, or the same rank, on the same host) become one *failure*; failures are ordered by
time where the times are known. The first failure is the first one of a ``root`` kind; a failure whose
every record is ``collateral`` (or on a line that carries a collateral event) never comes before one.

How records are made and grouped: :mod:`oomwatch.engine.failure_records`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oomwatch.engine.failure_records import (
    KERNEL_KIND,
    Record,
    file_records,
    group_records,
    rank_of,
    report_record,
)
from oomwatch.engine.model import Evidence
from oomwatch.engine.rules.ruleset import RuleSet
from oomwatch.engine.scanner import ScanResult
from oomwatch.engine.stamps import Stamp

MAX_LISTED = 50  # failures after the first listed in the JSON; the count of all is kept


@dataclass(frozen=True)
class Failure:
    """One process's failure: what the most telling of its lines says (``kind``, ``says``), where
    (host, rank, pid) and when (``time`` as printed, HH:MM:SS; None when unknown)."""

    kind: str
    role: str  # "root" or "collateral"
    says: str
    host: str | None
    rank: int | None
    pid: int | None
    time: str | None
    evidence: tuple[Evidence, ...]

    def who(self) -> str:
        """``rank 3 on node-1``, ``pid 4242``, ``a process``: only what is known."""
        name = f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}" if self.pid is not None else ""
        if self.host:
            return f"{name or 'a process'} on {self.host}"
        return name or "a process"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "role": self.role,
            "says": self.says,
            "host": self.host,
            "rank": self.rank,
            "pid": self.pid,
            "time": self.time,
            "evidence": [e.to_json() for e in self.evidence],
        }


@dataclass(frozen=True)
class Timeline:
    """The failures of a job in the order they happened, as far as the inputs tell: ``first`` started
    it, ``after`` followed (most of them collateral). ``ordered_by``: "time" (every failure had a
    comparable time), "time and input order" (some had none, or only seconds since boot), "input order"."""

    first: Failure
    after: tuple[Failure, ...]
    ordered_by: str
    notes: tuple[str, ...] = ()

    def headline(self) -> str:
        """``rank 3 on node-1 was killed by the kernel at 18:45:19; 3 ranks on 2 nodes failed after it``."""
        f = self.first
        text = f"{f.who()} {f.says}" + (f" at {f.time}" if f.time else "")
        if not self.after:
            return text
        ranks = sum(1 for a in self.after if a.rank is not None)
        others = len(self.after) - ranks
        parts = [_count(ranks, "rank")] if ranks else []
        if others:
            parts.append(_count(others, "other process", "other processes"))
        hosts = {a.host for a in self.after if a.host}
        where = f" on {_count(len(hosts), 'node')}" if hosts else ""
        verb = "failed" if self.ordered_by == "time" else "failed after it or at an unknown time"
        tail = f"{' and '.join(parts)}{where} {verb}"
        if verb == "failed":
            tail += " after it"
        return f"{text}; {tail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "first_failure": self.first.to_json(),
            "collateral": [a.to_json() for a in self.after[:MAX_LISTED]],
            "collateral_total": len(self.after),
            "ordered_by": self.ordered_by,
            "notes": list(self.notes),
        }


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _failure(
    group: list[Record], rules: RuleSet, order: dict[str, int], year: int
) -> tuple[Failure, Stamp | None, bool, int]:
    roots = [r for r in group if rules.failures[r.kind].role == "root" and not r.collateral_line]
    effects = [r for r in group if rules.failures[r.kind].role == "collateral"]
    telling = min(roots or effects or group, key=lambda r: (rank_of(order, r.kind), r.file, r.line))
    stamps = [r.stamp for r in group if r.stamp is not None]
    stamp = min(stamps, key=lambda s: (s.key(year), s.frac or 0.0)) if stamps else None
    pick = lambda name: next((getattr(r, name) for r in group if getattr(r, name) is not None), None)  # noqa: E731
    evidence: list[Evidence] = []
    seen: set[Evidence] = set()  # a flood of one line makes a group of thousands: no linear scan per line
    for r in sorted(group, key=lambda r: (r is not telling, r.file, r.line)):
        for e in r.evidence:
            if e not in seen:
                seen.add(e)
                evidence.append(e)
    kind = telling.kind
    failure = Failure(
        kind=kind,
        role="root" if roots else "collateral",
        says=rules.failures[kind].says,
        host=pick("host"),
        rank=pick("rank"),
        pid=telling.pid if telling.pid is not None else pick("pid"),
        time=stamp.shown if stamp else None,
        evidence=tuple(evidence[:4]),
    )
    boot_only = stamp is None and any(r.boot_time for r in group)
    return failure, stamp, boot_only, min(r.line for r in group)


def build_timeline(scans: Sequence[ScanResult], rules: RuleSet) -> Timeline | None:
    """The failures of these inputs in order, or None when there are fewer than two (one failure
    needs no timeline)."""
    order = {kind: i for i, kind in enumerate(rules.failures)}
    records: list[Record] = []
    for scan in scans:
        records.extend(file_records(scan.events, rules, order))
        records.extend(report_record(r) for r in scan.reports if r.killed and KERNEL_KIND in rules.failures)
    if not records:
        return None
    years = [r.stamp.year for r in records if r.stamp is not None and r.stamp.year is not None]
    year = max(years) if years else 0  # for the times printed without one (glog, syslog)
    built = [_failure(g, rules, order, year) for g in group_records(records)]
    if len(built) < 2:
        return None
    files = {scan.file: i for i, scan in enumerate(scans)}

    def sort_key(item: tuple[Failure, Stamp | None, bool, int]) -> tuple[Any, ...]:
        """By time (to the second; then a failure of its own first, then the fraction), then the
        failures without a time in input order."""
        f, stamp, _, line = item
        place = (files.get(f.evidence[0].file, 0) if f.evidence else 0, line)
        if stamp is None:
            return (1, (0, 0, 0, 0), False, 0.0, place)
        return (0, stamp.key(year), f.role != "root", stamp.frac or 0.0, place)

    ordered = sorted(built, key=sort_key)
    first_index = next((i for i, (f, _, _, _) in enumerate(ordered) if f.role == "root"), 0)
    first = ordered[first_index][0]
    after = tuple(f for i, (f, _, _, _) in enumerate(ordered) if i != first_index)
    untimed = sum(1 for _, s, _, _ in built if s is None)
    notes: list[str] = []
    if untimed == len(built):
        ordered_by = "input order"
        notes.append("No failure has a time: they are in the order of the inputs.")
    elif untimed:
        ordered_by = "time and input order"
        notes.append(f"{_count(untimed, 'failure has', 'failures have')} no time of its own; listed after the others.")
    else:
        ordered_by = "time"
    if any(boot for _, _, boot, _ in built):
        notes.append("dmesg's [seconds] since boot do not compare with wall-clock times: use `dmesg -T`.")
    if first.role == "collateral":
        notes.append(
            f"No failure of its own is in these inputs, only the effects of one: {first.who()} {first.says} first. "
            "Add the logs of the other ranks or nodes, and their kernel logs."
        )
    elif ordered[first_index][1] is None and first_index == 0 and untimed < len(built):
        notes.append("The first failure has no time: it comes first because the others are the effects of one.")
    if untimed < len(built):
        notes.append("Times are compared as printed: time zones are not applied.")
    return Timeline(first, after, ordered_by, tuple(notes))


def verdict_note(timeline: Timeline | None, verdict_evidence: Sequence[Evidence]) -> str | None:
    """A note when the lines the verdict rests on are a later failure's than the first one (not one
    of the same second): the verdict is then about that one, and the first is where to start."""
    if timeline is None or timeline.first.role != "root":
        return None
    first, lines = timeline.first, set(verdict_evidence)
    if lines & set(first.evidence):
        return None
    later = next((f for f in timeline.after if lines & set(f.evidence)), None)
    if later is None or (later.time is not None and later.time == first.time):
        return None
    where = f"{first.evidence[0].file}:{first.evidence[0].line}" if first.evidence else "its lines"
    return (
        f"The verdict is about a later failure ({later.who()} {later.says}) than the first one "
        f"({first.who()} {first.says}, {where}): start with the first; the later one may be its effect."
    )
