"""The history's bounds, as SQL on an open connection: fine rows folded into coarse buckets (the bucket's peak;
of a step counter, its highest step), rows older than the age bound dropped, labels no row refers to forgotten,
and the file kept under its size bound (oldest rows dropped, pages given back).
``history.store.HistoryStore.maintain`` runs them; each raises ``sqlite3.Error`` for its caller to handle.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sqlite3
from datetime import datetime
from pathlib import Path

from oomwatch.agent.history.schema import (
    CGROUP_PEAKS,
    CGROUP_PRESSURE,
    CGROUP_SIZES,
    NODE_COLUMNS,
    PROCESS_SIZES,
    SAMPLE_TABLES,
    STEP_COLUMNS,
)

log = logging.getLogger("oomwatch.agent")


def fold(conn: sqlite3.Connection, now: float, fine_seconds: float, coarse_step: float, low: float | None) -> float:
    """Fold the fine rows older than ``fine_seconds`` (and not before ``low``, what an earlier call folded) into
    ``coarse_step`` buckets; returns the time folded up to (a bucket boundary: no bucket is split)."""
    step = float(coarse_step)
    cut = math.floor((now - fine_seconds) / step) * step
    if low is not None and cut <= low:
        return low
    lo = -math.inf if low is None else low
    args = {"lo": lo, "cut": cut, "step": step}
    window = "time >= :lo AND time < :cut AND resolution < :step"
    maxes = ", ".join(f"MAX({c}) AS {c}" for c in PROCESS_SIZES)
    cg_maxes = ", ".join(f"MAX({c})" for c in (*CGROUP_SIZES, *CGROUP_PRESSURE, *CGROUP_PEAKS))
    conn.execute("BEGIN")
    conn.execute(
        f"""WITH agg AS (
                SELECT MIN(time) AS t0, MAX(rowid) AS last, {maxes}
                FROM process WHERE {window} GROUP BY pid, job, CAST(time / :step AS INTEGER))
            INSERT INTO process (time, resolution, pid, job, label, {", ".join(PROCESS_SIZES)})
            SELECT agg.t0, :step, p.pid, p.job, p.label, {", ".join(f"agg.{c}" for c in PROCESS_SIZES)}
            FROM agg JOIN process AS p ON p.rowid = agg.last""",
        args,
    )  # the label (role, rank, comm) of the bucket's last row (rows are appended): the latest the sampler knew
    conn.execute(f"DELETE FROM process WHERE {window}", args)
    conn.execute(
        f"""INSERT INTO cgroup (time, resolution, label, {", ".join((*CGROUP_SIZES, *CGROUP_PRESSURE, *CGROUP_PEAKS))})
            SELECT MIN(time), :step, label, {cg_maxes}
            FROM cgroup WHERE {window} GROUP BY label, CAST(time / :step AS INTEGER)""",
        args,
    )
    conn.execute(f"DELETE FROM cgroup WHERE {window}", args)
    conn.execute(
        f"""INSERT INTO node ({", ".join(NODE_COLUMNS)})
            SELECT MIN(time), :step, MIN(mem_available), MIN(swap_free), MAX(oom_kills), MAX(mem_total),
                   MAX(swap_total), MAX(pressure_some), MAX(pressure_full)
            FROM node WHERE {window} GROUP BY CAST(time / :step AS INTEGER)""",
        args,
    )
    conn.execute(f"DELETE FROM node WHERE {window}", args)
    # a counter's bucket keeps its highest step, at the time it was read (SQLite takes the bare columns of the
    # row that holds the MAX); a new epoch's lower readings in that bucket go, the next bucket's show it
    conn.execute(
        f"""INSERT INTO step ({", ".join(STEP_COLUMNS)})
            SELECT time, :step, job, rule, name, total, MAX(step)
            FROM step WHERE {window} GROUP BY job, rule, name, total, CAST(time / :step AS INTEGER)""",
        args,
    )
    conn.execute(f"DELETE FROM step WHERE {window}", args)
    conn.execute("COMMIT")
    return cut


def age(conn: sqlite3.Connection, oldest: float, *, scan_labels: bool) -> None:
    """Drop the rows before ``oldest`` and the labels left without rows (the process labels with ``scan_labels``)."""
    conn.execute("BEGIN")
    for table in SAMPLE_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE time < ?", (oldest,))
    clean_labels(conn, scan=scan_labels)
    conn.execute("COMMIT")


def clean_labels(conn: sqlite3.Connection, *, scan: bool = True) -> None:
    """Forget the jobs and cgroups no sample refers to any more (through their indexes: cheap),
    and with ``scan`` the process labels (a scan of the process table: once an hour)."""
    conn.execute(
        "DELETE FROM job WHERE NOT EXISTS (SELECT 1 FROM process WHERE process.job = job.id)"
        " AND NOT EXISTS (SELECT 1 FROM step WHERE step.job = job.id)"
    )
    conn.execute(
        "DELETE FROM cgroup_label WHERE NOT EXISTS (SELECT 1 FROM cgroup WHERE cgroup.label = cgroup_label.id)"
    )
    if scan:
        conn.execute("DELETE FROM label WHERE id NOT IN (SELECT DISTINCT label FROM process)")


def pages(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """page size, page count, free pages."""
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    count = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int(size), int(count), int(free)


def bound(conn: sqlite3.Connection, max_bytes: int, path: Path) -> None:
    """Keep the file under ``max_bytes``: past it, drop the oldest rows until under 90% and give the pages back."""
    page, count, _ = pages(conn)
    if page * count <= max_bytes:
        return
    before = page * count
    target = 0.9 * max_bytes
    dropped_before: float | None = None
    for _ in range(16):
        page, count, free = pages(conn)
        used = (count - free) * page
        if used > target:
            cutoff = drop_oldest(conn, min(1.0, (used - target) / used + 0.02))
            if cutoff is None:
                break
            dropped_before = cutoff
        # executescript steps the pragma to its end; execute() would free one page per call
        conn.executescript("PRAGMA incremental_vacuum;")
        page, count, _ = pages(conn)
        if page * count <= target:
            break
    with contextlib.suppress(sqlite3.OperationalError):  # a reader holds the WAL: a later checkpoint shrinks it
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    log.info(
        "history: %s was %d bytes, over its bound of %d: dropped rows older than %s, now %d bytes",
        path,
        before,
        max_bytes,
        "-" if dropped_before is None else datetime.fromtimestamp(dropped_before).isoformat(timespec="seconds"),
        page * count,
    )


def drop_oldest(conn: sqlite3.Connection, fraction: float) -> float | None:
    """Delete the oldest ``fraction`` of the rows (by the biggest table's times); returns the cutoff."""
    counts = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in SAMPLE_TABLES}
    table = max(counts, key=lambda t: counts[t])
    n = counts[table]
    if n == 0:
        return None
    k = min(n - 1, int(n * fraction))
    cutoff = conn.execute(f"SELECT time FROM {table} ORDER BY time LIMIT 1 OFFSET ?", (k,)).fetchone()[0]
    oldest = conn.execute(f"SELECT MIN(time) FROM {table}").fetchone()[0]
    op = "<=" if cutoff <= oldest else "<"  # always some progress
    conn.execute("BEGIN")
    for t in SAMPLE_TABLES:
        conn.execute(f"DELETE FROM {t} WHERE time {op} ?", (cutoff,))
    clean_labels(conn)
    conn.execute("COMMIT")
    return float(cutoff)
