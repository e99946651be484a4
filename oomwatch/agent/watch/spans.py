"""Where each OOM report starts and ends among kernel log lines as they arrive (kmsg records' texts, journal
entries, lines of a kernel log file): the watchers hand each report on as one incident.

The engine (``engine.kernel_report``) reads a whole report into its fields and decides where it ends
by what follows it (a grace of lines, the next report's start, lines that do not fit); a watcher must
decide from the ``Killed process`` line and the few reaper lines right after it, while later lines
have not been written yet, and must split a ``memory.oom.group`` kill into one report per victim. So
this splitter knows the report's three markers only, and the engine reads what it is handed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from oomwatch.procfs.kmsg import KmsgRecord

_KILL = re.compile(r"Killed process (\d+)|oom-kill:.*?,pid=(\d+)")
_HEADER = "invoked oom-killer"
_REAPER = "oom_reaper"


def kill_spans(texts: Sequence[str]) -> list[tuple[int, int, int]]:
    """(victim pid, first index, last index) of each OOM report among kernel log lines (or records'
    texts): from the report's "invoked oom-killer" header (when within the 2000 lines before)
    through its ``Killed process`` line and the reaper lines right after it. A report's
    ``oom-kill:`` summary and its ``Killed process`` line name the same pid: one report each."""
    out: list[tuple[int, int, int]] = []
    last_end = -1
    for i, text in enumerate(texts):
        if i <= last_end or "Killed process" not in text:
            continue
        m = _KILL.search(text)
        if not m:
            continue
        pid = int(m.group(1) or m.group(2))
        start = i
        for j in range(i, max(last_end, i - 2000), -1):  # never into the previous report
            if _HEADER in texts[j]:
                start = j
                break
        end = i
        while end + 1 < len(texts) and end + 1 - i <= 3 and _REAPER in texts[end + 1]:
            end += 1
        out.append((pid, start, end))
        last_end = end
    return out


def kill_reports(records: Sequence[KmsgRecord]) -> list[tuple[int, list[KmsgRecord]]]:
    """(victim pid, the records of its OOM report): :func:`kill_spans` over records."""
    return [(pid, list(records[a : b + 1])) for pid, a, b in kill_spans([r.text for r in records])]
