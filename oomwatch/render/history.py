"""``oomwatch history``'s output: the recorded rows of the training jobs' processes, their cgroups or their step
counters as a table for people (rows marked * are the coarse window's peaks), as CSV (a header and raw bytes) or as the
``oomwatch.history/v1`` JSON document. The rows are the history store's (``ProcessRow``, ``CgroupRow``,
``StepRow`` dataclasses); render takes them as values and reads no database.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

from oomwatch.engine.sizes import human
from oomwatch.textsafe import escape_controls

SCHEMA = "oomwatch.history/v1"


def _local(t: float) -> str:
    return datetime.fromtimestamp(t).isoformat(timespec="seconds")


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], right: frozenset[int]) -> str:
    """Rows in columns. Comms, job names and cgroup paths are chosen by the processes: every cell is
    escaped (no control character reaches the terminal, none starts a line of its own)."""
    body = [list(header), *[[escape_controls(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in body) for i in range(len(header))]
    lines = []
    for r in body:
        cells = [r[i].rjust(widths[i]) if i in right else r[i].ljust(widths[i]) for i in range(len(header))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


def _dash(v: int | None) -> str:
    return "-" if v is None else str(v)


_COARSE_NOTE = "* older than the fine window: the peak of each size over the {step:g} s from the row's time\n"


def process_text(rows: Sequence[Any], step: float) -> str:
    """Process rows (ProcessRow) as a table; a job column when they are of several jobs."""
    several_jobs = len({r.job for r in rows}) > 1
    header = ["time", *(["job"] if several_jobs else []), "pid", "role", "rank", "comm",
              "RSS", "anon", "USS", "PSS", "swap"]  # fmt: skip
    first_size = header.index("RSS")
    right = frozenset({header.index("pid"), header.index("rank"), *range(first_size, len(header))})
    coarse = any(r.resolution >= step for r in rows)
    out = []
    for r in rows:
        mark = "*" if r.resolution >= step else ""
        out.append([_local(r.time) + mark, *([r.job or "-"] if several_jobs else []), str(r.pid), r.role,
                    _dash(r.rank), r.comm, human(r.rss), human(r.anon), human(r.uss), human(r.pss),
                    human(r.swap)])  # fmt: skip
    text = _table(header, out, right)
    if coarse:
        text += _COARSE_NOTE.format(step=step)
    return text


def cgroup_text(rows: Sequence[Any], step: float) -> str:
    """Cgroup rows (CgroupRow) as a table."""
    header = ["time", "cgroup", "jobs", "usage", "limit", "eff.limit", "anon", "file", "shmem", "swap", "oom_kills"]
    right = frozenset(range(3, len(header)))
    coarse = any(r.resolution >= step for r in rows)
    out = []
    for r in rows:
        mark = "*" if r.resolution >= step else ""
        out.append([_local(r.time) + mark, r.path, r.jobs or "-", human(r.usage), human(r.limit),
                    human(r.effective_limit), human(r.anon), human(r.file), human(r.shmem), human(r.swap),
                    _dash(r.oom_kills)])  # fmt: skip
    text = _table(header, out, right)
    if coarse:
        text += _COARSE_NOTE.format(step=step)
    return text


def step_text(rows: Sequence[Any], step: float) -> str:
    """Step counter rows (StepRow) as a table: each counter's reading at the tick the agent found it."""
    several_jobs = len({r.job for r in rows}) > 1
    header = ["time", *(["job"] if several_jobs else []), "counter", "name", "step", "of"]
    right = frozenset({len(header) - 2, len(header) - 1})
    out = [[_local(r.time) + ("*" if r.resolution >= step else ""), *([r.job] if several_jobs else []), r.rule,
            r.name.strip() or "-", str(r.step), _dash(r.total)] for r in rows]  # fmt: skip
    text = _table(header, out, right)
    if any(r.resolution >= step for r in rows):
        text += f"* older than the fine window: a counter's highest step in the {step:g} s from the row's time\n"
    return text


def history_csv(rows: Sequence[Any], kind: type[Any]) -> str:
    """The rows as CSV: a header of ``kind``'s fields, then each row's raw values (None as empty)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([f.name for f in fields(kind)])
    for r in rows:
        writer.writerow(["" if v is None else v for v in asdict(r).values()])
    return buf.getvalue()


def history_json(key: str, rows: Sequence[Any]) -> str:
    """The rows under ``key`` (processes, cgroups, steps) in the ``oomwatch.history/v1`` document."""
    return json.dumps({"schema": SCHEMA, key: [asdict(r) for r in rows]}, indent=1)
