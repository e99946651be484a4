"""Which inputs are about the same failure (pure).

``oomwatch diagnose a.log b.log ...`` reads its inputs together: the launcher's log and the node's
dmesg tell one story. Inputs of different failures must not (ten logs of ten jobs gave one verdict
with notes drawn from all of them). Two inputs belong together when they share something: a pid
one names as dead that the other mentions, a host, a job, pod or cgroup, or times within
``LINK_SECONDS``. An input is set aside only when it shares nothing with the main group and
something positively tells them apart: each names its own dead processes and none of the
other's, their hosts differ, or their times are hours apart. An input that cannot be told
(no pid, host or time: a bare training log) stays: it is read with the rest, as before.

The main group is that of the first input given that shows memory running out, else the first
that shows a failure, else the first: what the user asked about first. A crash (a rank's error
after another rank was killed) is never set aside for its kind alone: it is often collateral.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from oomwatch.engine.clock import Moment, common, moment, moment_in
from oomwatch.engine.model import Event
from oomwatch.engine.scanner import ScanResult
from oomwatch.engine.selection import NAMING_KINDS
from oomwatch.engine.verdicts import NO_OOM_EVIDENCE, RAN_OUT
from oomwatch.engine.victims import pids_in

__all__ = ["Grouping", "Signature", "group_inputs", "signature"]

LINK_SECONDS = 15 * 60  # a job's logs of one failure: its ranks, nodes and kernel within minutes
APART_SECONDS = 6 * 3600  # times this far apart are two failures
_NOT_HOSTS = frozenset({"localhost", "localhost.localdomain", "(none)", "unknown"})
_JOB_FIELDS = ("job", "pod")


@dataclass(frozen=True)
class Signature:
    """What identifies one input's failure."""

    dead: frozenset[int] = frozenset()  # pids it names as killed or dead (kernel victims too)
    pids: frozenset[int] = frozenset()  # every pid it names (task tables, launchers, triggers)
    hosts: frozenset[str] = frozenset()
    jobs: frozenset[str] = frozenset()  # job ids, pods, cgroups
    times: tuple[Moment, ...] = ()  # first and last time of its failure lines
    failure: bool = False  # it shows a failure (a kill, an event)


@dataclass(frozen=True)
class Grouping:
    kept: tuple[int, ...]  # indexes of the inputs read together, in the order given
    aside: tuple[tuple[int, str], ...] = field(default_factory=tuple)  # (index, why)


def _time(ev: Event) -> Moment | None:
    return moment(ev.line.time) or moment_in(ev.line.text)


def signature(scan: ScanResult) -> Signature:
    dead: set[int] = set()
    pids: set[int] = set()
    hosts: set[str] = set()
    jobs: set[str] = set()
    times: list[Moment] = []
    for r in scan.reports:
        pid = r.dead_pid
        if pid is not None:
            dead.add(pid)
        pids.update(t.pid for t in r.tasks)
        dead.update(t.pid for t in r.group_killed)
        pids.update(p for p in (pid, r.trigger_pid) if p is not None)
        if r.host:
            hosts.add(r.host)
        jobs.update(c for c in (r.oom_memcg, r.task_memcg) if c and c.strip("/"))
        t = moment(r.time)
        if t is not None:
            times.append(t)
    for ev in scan.events:
        named = pids_in(ev.fields.get("pid"))
        pids.update(named)
        if ev.kind in NAMING_KINDS and not ev.line.kernel:
            dead.update(named)
        for host in (ev.line.host, ev.fields.get("node")):
            if host:
                hosts.add(host)
        jobs.update(v for k in _JOB_FIELDS if (v := ev.fields.get(k)))
        if ev.fields.get("cgroup", "").strip("/"):
            jobs.add(ev.fields["cgroup"])
        t = _time(ev)
        if t is not None:
            times.append(t)
    span: tuple[Moment, ...] = ()
    if times:
        clocks = {t[0] for t in times}
        on = [t for t in times if t[0] == ("wall" if "wall" in clocks else min(clocks))]
        span = (min(on, key=lambda t: t[1]), max(on, key=lambda t: t[1]))
    return Signature(
        dead=frozenset(dead), pids=frozenset(pids | dead), hosts=frozenset(h for h in hosts if h not in _NOT_HOSTS),
        jobs=frozenset(jobs), times=span, failure=bool(scan.events or dead),
    )  # fmt: skip


def _gap(a: Signature, b: Signature) -> float | None:
    """Seconds between the two inputs' spans (0 when they overlap), None when not comparable."""
    if not a.times or not b.times:
        return None
    on = common([*a.times, *b.times])
    if on is None:
        return None
    a0, a1, b0, b1 = on
    return max(0.0, b0 - a1, a0 - b1)


def linked(a: Signature, b: Signature) -> str | None:
    """What the two inputs share, in words, or None."""
    pid = sorted((a.dead & b.pids) | (b.dead & a.pids))
    if pid:
        return f"pid {pid[0]}"
    host = sorted(a.hosts & b.hosts)
    if host:
        return f"host {host[0]}"
    job = sorted(a.jobs & b.jobs)
    if job:
        return f"job {job[0]}"
    gap = _gap(a, b)
    if gap is not None and gap <= LINK_SECONDS:
        return "times within minutes"
    return None


def told_apart(a: Signature, b: Signature, verdicts: tuple[str | None, str | None] = (None, None)) -> str | None:
    """What positively says the two inputs are about different failures, in words, or None.
    ``verdicts``: each input's verdict read alone, when known."""
    if a.hosts and b.hosts and not a.hosts & b.hosts:
        return f"host {sorted(b.hosts)[0]}, not {sorted(a.hosts)[0]}"
    gap = _gap(a, b)
    if gap is not None and gap > APART_SECONDS:
        return f"its failure is {gap / 3600:.0f} h from the others'"
    if a.dead and b.dead and not (a.dead & b.pids or b.dead & a.pids):
        pids = ", ".join(str(p) for p in sorted(b.dead)[:3])
        return f"its dead pids ({pids}) appear nowhere in the other inputs, nor theirs in it"
    # what ran out, by verdict: two inputs that each show a different one and share nothing are two
    # failures (a crash names none: a rank's collateral error after another's kill is one failure)
    ran_out = [RAN_OUT.get(v or "") for v in verdicts]
    if ran_out[0] and ran_out[1] and ran_out[0] != ran_out[1]:
        return f"on its own it shows {ran_out[1]} running out, the others {ran_out[0]}, and nothing links them"
    return None


def group_inputs(scans: Sequence[ScanResult], verdicts: Sequence[str] | None = None) -> Grouping:
    """``verdicts``: each input's verdict when diagnosed alone (engine.api.Engine.group)."""
    if len(scans) <= 1:
        return Grouping(tuple(range(len(scans))))
    sigs = [signature(s) for s in scans]
    # components of inputs that share something
    parent = list(range(len(scans)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(scans)):
        for j in range(i + 1, len(scans)):
            if linked(sigs[i], sigs[j]) is not None:
                parent[root(j)] = root(i)
    # the first input that shows memory running out, else the first that shows a failure
    memory = [i for i in range(len(scans)) if verdicts is not None and verdicts[i] in RAN_OUT]
    failed = [i for i, s in enumerate(sigs) if s.failure and (verdicts is None or verdicts[i] != NO_OOM_EVIDENCE)]
    first = (memory or failed or [0])[0]
    main = root(first)
    members = [i for i in range(len(scans)) if root(i) == main]
    aside: list[tuple[int, str]] = []
    for i in range(len(scans)):
        if root(i) == main:
            continue
        alone = verdicts if verdicts is not None else [None] * len(scans)
        whys = [told_apart(sigs[m], sigs[i], (alone[m], alone[i])) for m in members]
        if all(w is not None for w in whys):
            aside.append((i, str(whys[0])))
    kept = tuple(i for i in range(len(scans)) if i not in {k for k, _ in aside})
    return Grouping(kept, tuple(aside))
