"""The failures of one job's inputs, as records, and the records of one process grouped. Pure.

Read by :mod:`oomwatch.engine.timeline`, which orders them. The events of the kinds
``rules/events.yaml`` lists under ``failures``, and each kernel OOM-kill report, become *records*:
what one line (or one launcher report, or one kernel report) says failed, with its host, rank, pid
and time where the inputs give them; :func:`group_records` puts the records of one process together.

Where each record is:

* **host**: the line's prefix (syslog, journal, ``kubectl logs --prefix``; for a kernel report, its
  lines'), else the last ``input_section``
  header above it in its file (``==> trainer-1.log <==``), else the one host a file's failure reports
  name (a ChildFailedError table's ``host`` rows), else unknown;
* **rank**: the event's ``rank`` field, else, on a line that names no pid (a line that names one is
  about that process, not its printer), the line's rank prefix (``rules/activities.yaml``
  ``streams``: ``[rank3]:``, ``srun -l``'s ``3:``); a kernel report's victim gets its rank by its pid;
* **time**: the line's prefix time, a glog or Python logging time at the start of the message, or the
  ``time`` row of its failure report (``oomwatch.engine.stamps``).

A launcher's failure report spans consecutive lines (a ChildFailedError table entry: time, host, rank,
exit code): from a ``failure_detail`` event on, the events on the next lines (at most one line between
two) that do not contradict it (another pid, rank, host or time) are one record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from oomwatch.engine.model import Event, Evidence, OomReport
from oomwatch.engine.rules.activity_rules import StreamRule
from oomwatch.engine.rules.ruleset import FailureKind, RuleSet
from oomwatch.engine.stamps import Stamp, is_boot_time, parse_field_time, parse_message_time, parse_prefix_time

KERNEL_KIND = "kernel_oom"  # a whole kernel OOM-kill report, in rules/events.yaml `failures`
DETAIL_KIND = "failure_detail"
SECTION_KIND = "input_section"
MAX_GAP = 2  # lines between two rows of one failure report


@dataclass
class Record:
    kind: str
    file: str
    line: int
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    pid: int | None = None
    stamp: Stamp | None = None
    boot_time: bool = False
    collateral_line: bool = False  # its line carries a collateral event
    evidence: list[Evidence] = field(default_factory=list)


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _stream_rank(streams: Sequence[StreamRule], text: str) -> int | None:
    for rule in streams:
        if not rule.on_file:
            rank = rule.rank(text)
            if rank is not None:
                return rank
    return None


def _message(streams: Sequence[StreamRule], text: str) -> str:
    """The text after a rank prefix that starts the line (``srun -l``'s `` 3: ``, ``[rank3]:``)."""
    for rule in streams:
        if not rule.on_file:
            m = rule.pattern.match(text, timeout=0.25)
            if m is not None and m.end() > 0:
                return text[m.end() :].lstrip()
    return text


def _event_record(ev: Event, streams: Sequence[StreamRule]) -> Record:
    f = ev.fields
    pid = _int(f.get("pid") or f.get("pid2") or f.get("pid3"))
    rank = _int(f.get("rank"))
    if rank is None and pid is None:  # a line that names a pid is about it, not about its printer
        rank = _stream_rank(streams, ev.line.text)
    stamp = parse_prefix_time(ev.line.time) or parse_message_time(_message(streams, ev.line.text))
    if "time" in f:
        stamp = stamp or parse_field_time(f["time"])
    return Record(
        kind=ev.kind,
        file=ev.line.file,
        line=ev.line.no,
        host=ev.line.host or f.get("host"),
        rank=rank,
        local_rank=_int(f.get("local_rank")),
        pid=pid,
        stamp=stamp,
        boot_time=is_boot_time(ev.line.time),
        evidence=[ev.evidence],
    )


def report_record(r: OomReport) -> Record:
    return Record(
        kind=KERNEL_KIND,
        file=r.file,
        line=r.first_line,
        host=r.host,
        pid=r.victim_pid,
        stamp=parse_prefix_time(r.time),
        boot_time=is_boot_time(r.time),
        evidence=[_victim_line(r)] if r.evidence else [],
    )


def _victim_line(r: OomReport) -> Evidence:
    """The report's line that names its victim (``Killed process 7001 (python)``), else its first."""
    named = f"process {r.victim_pid} ("
    return next((e for e in r.evidence if named in e.text), r.evidence[0])


_IDS = ("host", "rank", "local_rank", "pid")


def _agrees(a: Record, b: Record) -> bool:
    for name in _IDS:
        x, y = getattr(a, name), getattr(b, name)
        if x is not None and y is not None and x != y:
            return False
    if a.stamp and b.stamp:
        x, y = a.stamp, b.stamp
        if (x.month, x.day, x.seconds) != (y.month, y.day, y.seconds):
            return False
        if x.year is not None and y.year is not None and x.year != y.year:
            return False
    return True


def _absorb(into: Record, other: Record, order: dict[str, int]) -> None:
    for name in _IDS:
        if getattr(into, name) is None:
            setattr(into, name, getattr(other, name))
    if into.stamp is None:
        into.stamp = other.stamp
    telling = into.kind == DETAIL_KIND or rank_of(order, other.kind) < rank_of(order, into.kind)
    if other.kind != DETAIL_KIND and telling:
        into.kind = other.kind
    into.collateral_line = into.collateral_line or other.collateral_line
    into.evidence.extend(other.evidence)
    into.line = min(into.line, other.line)


def rank_of(order: dict[str, int], kind: str) -> int:
    """How telling a kind is: its place in rules/events.yaml `failures` (the first, the most)."""
    return order.get(kind, len(order))


def file_records(events: Sequence[Event], rules: RuleSet, order: dict[str, int]) -> list[Record]:
    """One file's records: hosts from sections and reports, report rows joined, lines marked."""
    collateral_lines = {
        ev.line.no for ev in events if rules.failures.get(ev.kind, FailureKind("", "")).role == "collateral"
    }
    named = {ev.fields["host"] for ev in events if ev.kind == DETAIL_KIND and "host" in ev.fields}
    file_host = next(iter(named)) if len(named) == 1 else None
    records: list[Record] = []
    section: str | None = None
    chain: Record | None = None
    chain_end = 0
    for ev in sorted(events, key=lambda e: (e.line.no, e.kind != SECTION_KIND)):
        if ev.kind == SECTION_KIND:
            section = ev.fields.get("host") or None
            chain = None
            continue
        if ev.kind not in rules.failures and ev.kind != DETAIL_KIND:
            continue
        rec = _event_record(ev, rules.streams)
        rec.host = rec.host or section or file_host
        rec.collateral_line = ev.line.no in collateral_lines
        if chain is not None and ev.line.no <= chain_end + MAX_GAP and _agrees(chain, rec):
            _absorb(chain, rec, order)
            chain_end = ev.line.no
            continue
        chain = rec if ev.kind == DETAIL_KIND else None
        chain_end = ev.line.no
        records.append(rec)
    return [r for r in records if r.kind != DETAIL_KIND]


def group_records(records: list[Record]) -> list[list[Record]]:
    """Records of one process together: the same (host, pid) or (host, rank); a record without a
    host joins the one process elsewhere with its pid or rank, when there is exactly one."""
    groups: list[list[Record]] = []
    index: dict[tuple[Any, ...], int] = {}

    def keys(r: Record, host: str | None) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        if r.pid is not None:
            out.append((host, "pid", r.pid))
        if r.rank is not None:
            out.append((host, "rank", r.rank))
        return out

    def place(r: Record, host: str | None) -> None:
        found = sorted({index[k] for k in keys(r, host) if k in index})
        if found:
            target = found[0]
            for other in found[1:]:  # the record links two groups: one process
                moved = groups[other]
                groups[target].extend(moved)
                groups[other] = []
                for m in moved:
                    for k in keys(m, m.host):
                        index[k] = target
        else:
            target = len(groups)
            groups.append([])
        groups[target].append(r)
        for k in keys(r, host):
            index[k] = target

    named = [r for r in records if r.pid is not None or r.rank is not None]
    for r in (r for r in named if r.host is not None):
        place(r, r.host)
    hosts_of: dict[tuple[Any, ...], set[str]] = {}
    for host, kind, value in [k for k in index if k[0] is not None]:
        hosts_of.setdefault((kind, value), set()).add(host)
    for r in (r for r in named if r.host is None):
        hosts = set().union(*(hosts_of.get(k[1:], set()) for k in keys(r, None)))
        if len(hosts) == 1:
            r.host = next(iter(hosts))
        place(r, r.host)
    # lines that name no pid or rank ("Killed", "Bus error"): the one process of their file and host
    # that has a name, else one process per file and host
    anonymous: dict[tuple[str, str | None], int] = {}
    for r in (r for r in records if r.pid is None and r.rank is None):
        where = (r.file, r.host)
        if where not in anonymous:
            owners = [i for i, g in enumerate(groups) if g and any((x.file, x.host) == where for x in g)]
            anonymous[where] = owners[0] if len(owners) == 1 else len(groups)
            if len(owners) != 1:
                groups.append([])
        groups[anonymous[where]].append(r)
    return [g for g in groups if g]
