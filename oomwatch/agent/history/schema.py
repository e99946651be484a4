"""The history file's schema: its tables, the columns each schema version added and how an older file
is brought up to date, the rows read back, and which SQLite errors mean the file cannot be used."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("oomwatch.agent")

FORMAT = "oomwatch.history"
SCHEMA_VERSION = 5  # 2 added memory pressure (PSI avg10) to cgroup and node rows, and node totals; 3 rchar;
# 4 the jobs' step counters (the step table); 5 the highest read between ticks (anon_peak, unreclaimable_peak)


PROCESS_SIZES = ("rss", "anon", "file", "shmem", "swap", "hwm", "pss", "uss", "swap_pss", "rchar", "anon_peak")
# "limit" is an SQL keyword: the column is mem_limit, the field limit
CGROUP_SIZES = ("usage", "mem_limit", "effective_limit", "anon", "file", "shmem", "swap", "oom_kills")
CGROUP_PRESSURE = ("pressure_some", "pressure_full")  # PSI avg10, percent (REAL)
CGROUP_PEAKS = ("unreclaimable_peak",)  # after the pressure columns (schema 5)
NODE_COLUMNS = ("time", "resolution", "mem_available", "swap_free", "oom_kills", "mem_total", "swap_total",
                 "pressure_some", "pressure_full")  # fmt: skip
# what schema 2 added to a schema 1 file: (table, column, type)
ADDED_IN_2 = (
    ("cgroup", "pressure_some", "REAL"), ("cgroup", "pressure_full", "REAL"),
    ("node", "mem_total", "INTEGER"), ("node", "swap_total", "INTEGER"),
    ("node", "pressure_some", "REAL"), ("node", "pressure_full", "REAL"),
)  # fmt: skip

# what schema 3 added: the bytes each process had read (/proc/PID/io rchar; a counter: its fold, the
# bucket's largest, is its last value)
ADDED_IN_3 = (("process", "rchar", "INTEGER"),)
# what schema 5 added: the highest a process's anonymous memory and a cgroup's anon + shmem reached between a
# tick and the one before it, read every 20 ms while the job is in its first steps (agent.peaks; None otherwise);
# a coarse row keeps its bucket's highest
ADDED_IN_5 = (("process", "anon_peak", "INTEGER"), ("cgroup", "unreclaimable_peak", "INTEGER"))
ADDED = ((2, ADDED_IN_2), (3, ADDED_IN_3), (5, ADDED_IN_5))

# what schema 4 added: each job's step counters as its output showed them (agent.steps), one row per counter and
# tick it moved in; a coarse row keeps its bucket's highest step (at that reading's time)
STEP_TABLE = """
CREATE TABLE IF NOT EXISTS step (
    time REAL NOT NULL, resolution REAL NOT NULL, job INTEGER NOT NULL, rule TEXT NOT NULL, name TEXT NOT NULL,
    total INTEGER, step INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS step_job_time ON step (job, time);
"""
TABLES_ADDED = ((4, "step", STEP_TABLE),)
STEP_COLUMNS = ("time", "resolution", "job", "rule", "name", "total", "step")

# Samples refer to their labels by id (a job name, a cgroup path and the comm would otherwise be
# repeated in every row and two of its indexes): the file is about half the size.
SCHEMA = (
    f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE job (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE label (id INTEGER PRIMARY KEY, role TEXT NOT NULL, rank INTEGER, local_rank INTEGER, comm TEXT NOT NULL);
CREATE TABLE process (
    time REAL NOT NULL, resolution REAL NOT NULL, pid INTEGER NOT NULL, job INTEGER NOT NULL, label INTEGER NOT NULL,
    {", ".join(f"{c} INTEGER" for c in PROCESS_SIZES)}
);
CREATE INDEX process_time ON process (time);
CREATE INDEX process_job_time ON process (job, time);
CREATE TABLE cgroup_label (id INTEGER PRIMARY KEY, path TEXT NOT NULL, jobs TEXT NOT NULL);
CREATE INDEX cgroup_label_path ON cgroup_label (path);
CREATE TABLE cgroup (
    time REAL NOT NULL, resolution REAL NOT NULL, label INTEGER NOT NULL,
    {", ".join(f"{c} INTEGER" for c in CGROUP_SIZES)}, {", ".join(f"{c} REAL" for c in CGROUP_PRESSURE)},
    {", ".join(f"{c} INTEGER" for c in CGROUP_PEAKS)}
);
CREATE INDEX cgroup_time ON cgroup (time);
CREATE INDEX cgroup_label_time ON cgroup (label, time);
CREATE TABLE node (
    time REAL NOT NULL, resolution REAL NOT NULL, mem_available INTEGER, swap_free INTEGER, oom_kills INTEGER,
    mem_total INTEGER, swap_total INTEGER, pressure_some REAL, pressure_full REAL
);
CREATE INDEX node_time ON node (time);
"""
    + STEP_TABLE
)
LABEL_COLUMNS = {"job": ("name",), "label": ("role", "rank", "local_rank", "comm"), "cgroup_label": ("path", "jobs")}
TABLES = frozenset({"meta", "job", "label", "process", "cgroup_label", "cgroup", "node", "step"})
SAMPLE_TABLES = ("process", "cgroup", "node", "step")
SELECT_PROCESS = f"""SELECT p.time, p.resolution, p.pid, j.name, l.role, l.rank, l.local_rank, l.comm,
    {", ".join(f"p.{c}" for c in PROCESS_SIZES)}
    FROM process AS p JOIN job AS j ON j.id = p.job JOIN label AS l ON l.id = p.label"""
SELECT_STEP = """SELECT s.time, s.resolution, j.name, s.rule, s.name, s.total, s.step
    FROM step AS s JOIN job AS j ON j.id = s.job"""
SELECT_CGROUP = f"""SELECT c.time, c.resolution, l.path, l.jobs, {", ".join(f"c.{x}" for x in CGROUP_SIZES)},
    {", ".join(f"c.{x}" for x in (*CGROUP_PRESSURE, *CGROUP_PEAKS))}
    FROM cgroup AS c JOIN cgroup_label AS l ON l.id = c.label"""


@dataclass(frozen=True)
class ProcessRow:
    time: float  # epoch seconds; for a coarse row, the first time in its bucket
    resolution: float  # seconds: the tick interval for a fine row, coarse_step for a folded one
    pid: int
    job: str | None
    role: str
    rank: int | None
    local_rank: int | None
    comm: str
    rss: int | None
    anon: int | None
    file: int | None
    shmem: int | None
    swap: int | None
    hwm: int | None
    pss: int | None
    uss: int | None
    swap_pss: int | None
    rchar: int | None = None  # bytes read so far (schema 3; None in older files)
    anon_peak: int | None = None  # the highest anon read since the tick before (schema 5; None when not read)


@dataclass(frozen=True)
class CgroupRow:
    time: float
    resolution: float
    path: str
    jobs: str  # the jobs in it, comma-joined
    usage: int | None
    limit: int | None
    effective_limit: int | None
    anon: int | None
    file: int | None
    shmem: int | None
    swap: int | None
    oom_kills: int | None
    pressure_some: float | None = None  # PSI avg10 in percent (v2 cgroups); a coarse row keeps the bucket's highest
    pressure_full: float | None = None
    unreclaimable_peak: int | None = None  # the highest anon + shmem read since the tick before (schema 5)


@dataclass(frozen=True)
class NodeRow:
    time: float
    resolution: float
    mem_available: int | None  # a coarse row keeps the bucket's lowest
    swap_free: int | None  # the bucket's lowest
    oom_kills: int | None
    mem_total: int | None = None
    swap_total: int | None = None
    pressure_some: float | None = None  # /proc/pressure/memory avg10, percent; a coarse row keeps the highest
    pressure_full: float | None = None


@dataclass(frozen=True)
class StepRow:
    time: float
    resolution: float
    job: str
    rule: str  # the step rule that read the counter
    name: str  # the counter's name (a progress bar's description)
    total: int | None  # what it counts to, when it says
    step: int


_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


class Unusable(Exception):
    """The file is not one this version can write into: not a database, corrupt, or not ours."""


def _errorcode(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    return code & 0xFF if isinstance(code, int) else None


def is_corrupt(exc: BaseException) -> bool:
    if isinstance(exc, Unusable):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = _errorcode(exc)
    if code is not None:
        return code in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc)
    return "malformed" in text or "not a database" in text


def insert(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"


def check_ours(conn: sqlite3.Connection, tables: set[str]) -> int:
    """The file's schema version (one this oomwatch reads), or raise Unusable."""
    if "meta" not in tables:
        raise Unusable("not an oomwatch history file (no meta table)")
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("format") != FORMAT:
        raise Unusable("not an oomwatch history file")
    version = meta.get("schema_version")
    if version not in {str(v) for v in range(1, SCHEMA_VERSION + 1)}:
        raise Unusable(f"history schema version {version}, this oomwatch reads 1 to {SCHEMA_VERSION}")
    # a table a later schema added is missing from an older file until it is upgraded
    missing = TABLES - tables - {name for since, name, _ in TABLES_ADDED if int(version) < since}
    if missing:
        raise Unusable(f"history file without its {', '.join(sorted(missing))} table")
    return int(version)


def upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Bring a file of an older schema to this one in one transaction: columns and tables are added (old rows
    read the columns as unknown), nothing is rewritten."""
    conn.execute("BEGIN")
    try:
        for since, columns in ADDED:
            if version < since:
                for table, column, kind in columns:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        for since, _, statements in TABLES_ADDED:
            if version < since:
                for statement in statements.split(";"):
                    if statement.strip():
                        conn.execute(statement)
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def prepare(conn: sqlite3.Connection, path: Path) -> None:
    """Check an existing file at ``path`` (raises Unusable or a corrupt DatabaseError) or create the schema."""
    check = [str(row[0]) for row in conn.execute("PRAGMA quick_check(3)")]
    if check != ["ok"]:
        detail = "; ".join(line for c in check for line in c.splitlines() if line and not line.startswith("***"))
        raise Unusable(f"integrity check failed: {detail[:200]}")
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        # small pages: a tick's rows touch a few pages of each table and index, and each touched page is
        # written whole to the WAL (and again at the checkpoint): 1 KiB halves what is written per tick
        conn.execute("PRAGMA page_size = 1024")  # before auto_vacuum, or it does not hold
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before the first table, or it does not hold
        conn.execute("PRAGMA journal_mode = WAL").fetchall()
        conn.execute("BEGIN")
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION)), ("created", str(time.time()))],
        )
        conn.execute("COMMIT")
    else:
        version = check_ours(conn, tables)
        conn.execute("PRAGMA journal_mode = WAL").fetchall()
        if version < SCHEMA_VERSION:
            upgrade(conn, version)
            log.info("history: %s upgraded from schema %d to %d", path, version, SCHEMA_VERSION)
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(f"PRAGMA journal_size_limit = {16 << 20}")
