"""A cgroup's memory event counters pasted into a log, read as blocks (pure).

``memory.events`` (cgroup v2, and ``memory.events.local``) and ``memory.oom_control`` (v1)
are ``key value`` lines in a fixed order (mm/memcontrol.c, memory_events_show and
mem_cgroup_oom_control_read)::

    low 0                      oom_kill_disable 0
    high 0                     under_oom 0
    max 1234                   oom_kill 2
    oom 3
    oom_kill 3
    oom_group_kill 1

A line alone proves nothing (``max 0``; /proc/vmstat has an ``oom_kill`` line too), so a dump is
two keys or more on consecutive lines in that order, a line that names its file
(``.../memory.events:oom_kill 3``), or a block printed on one line (the rules of
rules/fingerprints/cgroup_files.yaml say which lines are which: event ``memcg_counter``).
``oom_kill`` counts the cgroup's processes killed by any OOM killer since the cgroup was made;
``oom`` the times its limit was hit and an allocation was about to fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oomwatch.engine.model import Event, Evidence

ORDERS = (
    ("low", "high", "max", "oom", "oom_kill", "oom_group_kill", "sock_throttled"),  # memory.events
    ("oom_kill_disable", "under_oom", "oom_kill"),  # memory.oom_control
)
_ONE_LINE_KEYS = ("oom", "oom_kill", "oom_group_kill", "under_oom")


@dataclass(frozen=True)
class CounterDump:
    file: str  # the input
    counters: dict[str, int]
    evidence: tuple[Evidence, ...]


def _ordered(keys: Sequence[str]) -> bool:
    """The keys follow one file's order (each after the one before it)."""
    for order in ORDERS:
        if all(k in order for k in keys):
            at = [order.index(k) for k in keys]
            if all(a < b for a, b in zip(at, at[1:], strict=False)):
                return True
    return False


def counter_dumps(events: Sequence[Event]) -> list[CounterDump]:
    """The dumps among the ``memcg_counter`` events, in order of their lines."""
    dumps: list[CounterDump] = []
    run: list[Event] = []

    def close() -> None:
        keys = [ev.fields["key"] for ev in run]
        named = any(ev.fields.get("file") for ev in run)
        if run and (named or (len(keys) >= 2 and _ordered(keys))):
            counters = {ev.fields["key"]: int(ev.fields["value"]) for ev in run}
            dumps.append(CounterDump(run[0].line.file, counters, tuple(ev.evidence for ev in run)))
        run.clear()

    for ev in events:
        if ev.kind != "memcg_counter":
            continue
        if "key" not in ev.fields:  # a block on one line
            close()
            counters = {k: int(ev.fields[k]) for k in _ONE_LINE_KEYS if ev.fields.get(k, "").isdigit()}
            dumps.append(CounterDump(ev.line.file, counters, (ev.evidence,)))
            continue
        if run:
            last = run[-1]
            keys = [e.fields["key"] for e in run] + [ev.fields["key"]]
            if last.line.file != ev.line.file or ev.line.no != last.line.no + 1 or not _ordered(keys):
                close()
        run.append(ev)
    close()
    return dumps


def counter_facts(events: Sequence[Event]) -> dict[str, int | None]:
    """``cgroup.counted_*``: the largest of each counter over the dumps (None: no dump says it)."""
    dumps = counter_dumps(events)
    out: dict[str, int | None] = {}
    for fact, key in (
        ("cgroup.counted_oom_kills", "oom_kill"),
        ("cgroup.counted_ooms", "oom"),
        ("cgroup.counted_group_kills", "oom_group_kill"),
    ):
        values = [d.counters[key] for d in dumps if key in d.counters]
        out[fact] = max(values) if values else None
    return out
