"""What a ``memory.oom.group`` kill adds to a diagnosis: the processes killed with the victim (pure).

With ``memory.oom.group`` set (the default for the containers of Kubernetes >= 1.28 on cgroup v2)
the kernel kills the victim it chose and then every other task of that cgroup, one `Killed
process` line each. They are one failure: the victim stays the headline, the others are said in
one note.
"""

from __future__ import annotations

from collections.abc import Sequence

from oomwatch.engine.facts import primary_report
from oomwatch.engine.model import KilledTask, OomReport, Victim
from oomwatch.engine.sizes import human

MAX_LISTED = 5  # processes named in the note; the rest are counted


def _task(t: KilledTask) -> str:
    what = ", ".join(x for x in (t.name, _rss(t.anon_rss_bytes)) if x)
    return f"pid {t.pid}" + (f" ({what})" if what else "")


def _rss(n: int | None) -> str:
    return f"{human(n)} anonymous RSS" if n is not None else ""


def group_kill_notes(reports: Sequence[OomReport], victim: Victim | None) -> list[str]:
    """A note for the report that killed ``victim`` (else the first with a kill) when its cgroup's
    other tasks were killed with it."""
    rep = primary_report(reports, victim)
    if rep is None or not rep.group_killed:
        return []
    tasks = rep.group_killed
    listed = ", ".join(_task(t) for t in tasks[:MAX_LISTED])
    more = f" and {len(tasks) - MAX_LISTED} more" if len(tasks) > MAX_LISTED else ""
    n = len(tasks)
    return [
        f"{n} process{'es' if n != 1 else ''} killed with it (memory.oom.group set on {rep.oom_group}): "
        f"{listed}{more}. One failure: once the kernel kills a task of that cgroup, it kills all its tasks."
    ]
