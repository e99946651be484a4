"""Which rank or node failed first, and which failed because of it. Pure.

The inputs of a job of many ranks or nodes (per-pod ``kubectl logs``, Slurm per-node outputs, torchrun
logs, a combined log, the kernel's log) hold one failure that started it and many that followed: peers
whose connection was reset, watchdog timeouts, ranks their launcher stopped, launchers' summaries. The
events of the kinds ``rules/events.yaml`` lists under ``failures`` become *records*; the records of one
process (the same pid, or the same rank, on the same host) become one *failure*; failures are ordered by
time where the times are known. The first failure is the first one of a ``root`` kind; a failure whose
every record is ``collateral`` (or on a line that carries a collateral event) never comes before one.

Where each record is:

* **host**: the line's prefix (syslog, journal, ``kubectl logs --prefix``), else the last ``input_section``
  header above it in its file (``==> trainer-1.log <==``), else the one host a file's failure reports
  name (a ChildFailedError table's ``host`` rows), else unknown;
* **rank**: the event's ``rank`` field, else the line's rank prefix (``rules/activities.yaml``
  ``streams``: ``[rank3]:``, ``srun -l``'s ``3:``);
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

from oomwatch.engine.activity_rules import StreamRule
from oomwatch.engine.loader import FailureKind, RuleSet
from oomwatch.engine.model import Event, Evidence, OomReport
from oomwatch.engine.scanner import ScanResult
from oomwatch.engine.stamps import Stamp, is_boot_time, parse_field_time, parse_message_time, parse_prefix_time

KERNEL_KIND = "kernel_oom"  # a whole kernel OOM-kill report, in rules/events.yaml `failures`
DETAIL_KIND = "failure_detail"
SECTION_KIND = "input_section"
MAX_GAP = 2  # lines between two rows of one failure report
MAX_LISTED = 50  # failures after the first listed in the JSON; the count of all is kept


@dataclass
class _Record:
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


def _event_record(ev: Event, streams: Sequence[StreamRule]) -> _Record:
    f = ev.fields
    pid = _int(f.get("pid") or f.get("pid2") or f.get("pid3"))
    rank = _int(f.get("rank"))
    if rank is None and pid is None:  # a line that names a pid is about it, not about its printer
        rank = _stream_rank(streams, ev.line.text)
    stamp = parse_prefix_time(ev.line.time) or parse_message_time(_message(streams, ev.line.text))
    if "time" in f:
        stamp = stamp or parse_field_time(f["time"])
    return _Record(
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


def _report_record(r: OomReport) -> _Record:
    return _Record(
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


def _agrees(a: _Record, b: _Record) -> bool:
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


def _absorb(into: _Record, other: _Record, order: dict[str, int]) -> None:
    for name in _IDS:
        if getattr(into, name) is None:
            setattr(into, name, getattr(other, name))
    if into.stamp is None:
        into.stamp = other.stamp
    telling = into.kind == DETAIL_KIND or _rank_of(order, other.kind) < _rank_of(order, into.kind)
    if other.kind != DETAIL_KIND and telling:
        into.kind = other.kind
    into.collateral_line = into.collateral_line or other.collateral_line
    into.evidence.extend(other.evidence)
    into.line = min(into.line, other.line)


def _rank_of(order: dict[str, int], kind: str) -> int:
    """How telling a kind is: its place in rules/events.yaml `failures` (the first, the most)."""
    return order.get(kind, len(order))


def _file_records(events: Sequence[Event], rules: RuleSet, order: dict[str, int]) -> list[_Record]:
    """One file's records: hosts from sections and reports, report rows joined, lines marked."""
    collateral_lines = {
        ev.line.no for ev in events if rules.failures.get(ev.kind, FailureKind("", "")).role == "collateral"
    }
    named = {ev.fields["host"] for ev in events if ev.kind == DETAIL_KIND and "host" in ev.fields}
    file_host = next(iter(named)) if len(named) == 1 else None
    records: list[_Record] = []
    section: str | None = None
    chain: _Record | None = None
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


def _group(records: list[_Record]) -> list[list[_Record]]:
    """Records of one process together: the same (host, pid) or (host, rank); a record without a
    host joins the one process elsewhere with its pid or rank, when there is exactly one."""
    groups: list[list[_Record]] = []
    index: dict[tuple[Any, ...], int] = {}

    def keys(r: _Record, host: str | None) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        if r.pid is not None:
            out.append((host, "pid", r.pid))
        if r.rank is not None:
            out.append((host, "rank", r.rank))
        return out

    def place(r: _Record, host: str | None) -> None:
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


def _failure(
    group: list[_Record], rules: RuleSet, order: dict[str, int], year: int
) -> tuple[Failure, Stamp | None, bool, int]:
    roots = [r for r in group if rules.failures[r.kind].role == "root" and not r.collateral_line]
    effects = [r for r in group if rules.failures[r.kind].role == "collateral"]
    telling = min(roots or effects or group, key=lambda r: (_rank_of(order, r.kind), r.file, r.line))
    stamps = [r.stamp for r in group if r.stamp is not None]
    stamp = min(stamps, key=lambda s: (s.key(year), s.frac or 0.0)) if stamps else None
    pick = lambda name: next((getattr(r, name) for r in group if getattr(r, name) is not None), None)  # noqa: E731
    evidence: list[Evidence] = []
    for r in sorted(group, key=lambda r: (r is not telling, r.file, r.line)):
        evidence.extend(e for e in r.evidence if e not in evidence)
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
    records: list[_Record] = []
    for scan in scans:
        records.extend(_file_records(scan.events, rules, order))
        records.extend(_report_record(r) for r in scan.reports if r.killed and KERNEL_KIND in rules.failures)
    if not records:
        return None
    years = [r.stamp.year for r in records if r.stamp is not None and r.stamp.year is not None]
    year = max(years) if years else 0  # for the times printed without one (glog, syslog)
    built = [_failure(g, rules, order, year) for g in _group(records)]
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
