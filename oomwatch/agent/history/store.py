"""The agent's flight recorder: every tick's training-job processes, their cgroups and the node,
kept in one SQLite file (WAL) so that after an OOM kill ``oomwatch history`` shows what grew.

What is kept: rows newer than ``fine_seconds`` at the tick's resolution; older ones folded into
``coarse_step`` buckets per pid (per cgroup path) that keep the bucket's first time and the MAX of
every size (the peak is what matters after an OOM kill; for the node, the MIN of available memory
and free swap); nothing older than ``max_age``; and when the file grows past ``max_bytes``, the
oldest rows are dropped until it is under 90% of it and the space is given back to the file system
(``auto_vacuum=INCREMENTAL``). ``record()`` runs this maintenance itself, at most once a minute of
tick time.

It is a recorder, never a reason for the agent to fail: ``record()`` and ``maintain()`` never raise.
A disk that is full, a directory that cannot be written, a file that is not a database or is
corrupt: each is said once through the agent's notices and logged; a corrupt or foreign file is
moved aside to ``<name>.corrupt-<UTC time>`` and a new one started; writes resume by themselves
when they can. A commit survives the agent being SIGKILLed (WAL, ``synchronous=NORMAL``: a power
loss may lose the last ticks, never the file).

measured: (tests/agent/test_history.py::test_disk_use_per_hour, ``pytest -s``): a job of 150
processes at a 1 s interval, one hour of synthetic ticks (3600 x 150 real ProcessSample objects, two
cgroups, the node) with maintenance running as record() runs it, defaults (fine_seconds=900,
coarse_step=10), SQLite 3.40, Python 3.11, ext4 on a virtual disk: the file is 21.1 MB after the
first hour (15 min at 1 s and 45 min of 10 s peaks; 117 bytes a process row with its indexes), and
each further hour adds 6.3 MB of 10 s peaks: about 170 MB for the full day (extrapolated), a third
of the 512 MiB bound. record() costs 1.3-1.4 ms a tick (median; 2.2-2.4 ms on average with
maintenance), maintain() 45 ms once a minute. Writes: about 93 KiB a tick reach the file system
(the WAL, its checkpoints and the minute's folding), about 8 GB a day at this size; most of it is
the one-transaction-per-tick design (each commit rewrites the last page of each table and index).

There is no (pid, time) index: a tick's rows would land on a different page of it for every pid, and
each of those pages is rewritten in the WAL at every commit (measured while choosing, same job: 300
KiB of WAL a tick with it, 31 KiB without, on 1 KiB pages; 740 KiB with it on 4 KiB pages). A query
by pid reads the rows of its time range instead (``since``/``until`` use the (time) index; a whole
day of that job, 1.4 million rows: 1.5 s).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from oomwatch.agent.model import Tick
from oomwatch.agent.sample.notices import Notices
from oomwatch.errors import InputError
from oomwatch.procfs.pressure import Pressure

log = logging.getLogger("oomwatch.agent")

FORMAT = "oomwatch.history"
SCHEMA_VERSION = 3  # 2 added memory pressure (PSI avg10) to cgroup and node rows, and node totals; 3 rchar
MAINTAIN_EVERY = 60.0  # seconds of tick time between maintenance runs started by record()
RETRY_OPEN_EVERY = 60.0  # seconds of tick time between attempts to open a file that could not be opened
DEFAULT_RESOLUTION = 1.0  # the agent's default interval: the first tick's resolution, before a second one says
_BUSY_MS = 500

_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26

_PROCESS_SIZES = ("rss", "anon", "file", "shmem", "swap", "hwm", "pss", "uss", "swap_pss", "rchar")
# "limit" is an SQL keyword: the column is mem_limit, the field limit
_CGROUP_SIZES = ("usage", "mem_limit", "effective_limit", "anon", "file", "shmem", "swap", "oom_kills")
_CGROUP_PRESSURE = ("pressure_some", "pressure_full")  # PSI avg10, percent (REAL)
_NODE_COLUMNS = ("time", "resolution", "mem_available", "swap_free", "oom_kills", "mem_total", "swap_total",
                 "pressure_some", "pressure_full")  # fmt: skip
# what schema 2 added to a schema 1 file: (table, column, type)
_ADDED_IN_2 = (
    ("cgroup", "pressure_some", "REAL"), ("cgroup", "pressure_full", "REAL"),
    ("node", "mem_total", "INTEGER"), ("node", "swap_total", "INTEGER"),
    ("node", "pressure_some", "REAL"), ("node", "pressure_full", "REAL"),
)  # fmt: skip

# what schema 3 added: the bytes each process had read (/proc/PID/io rchar; a counter: its fold, the
# bucket's largest, is its last value)
_ADDED_IN_3 = (("process", "rchar", "INTEGER"),)
_ADDED = ((2, _ADDED_IN_2), (3, _ADDED_IN_3))

# Samples refer to their labels by id (a job name, a cgroup path and the comm would otherwise be
# repeated in every row and two of its indexes): the file is about half the size.
_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE job (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE label (id INTEGER PRIMARY KEY, role TEXT NOT NULL, rank INTEGER, local_rank INTEGER, comm TEXT NOT NULL);
CREATE TABLE process (
    time REAL NOT NULL, resolution REAL NOT NULL, pid INTEGER NOT NULL, job INTEGER NOT NULL, label INTEGER NOT NULL,
    {", ".join(f"{c} INTEGER" for c in _PROCESS_SIZES)}
);
CREATE INDEX process_time ON process (time);
CREATE INDEX process_job_time ON process (job, time);
CREATE TABLE cgroup_label (id INTEGER PRIMARY KEY, path TEXT NOT NULL, jobs TEXT NOT NULL);
CREATE INDEX cgroup_label_path ON cgroup_label (path);
CREATE TABLE cgroup (
    time REAL NOT NULL, resolution REAL NOT NULL, label INTEGER NOT NULL,
    {", ".join(f"{c} INTEGER" for c in _CGROUP_SIZES)}, {", ".join(f"{c} REAL" for c in _CGROUP_PRESSURE)}
);
CREATE INDEX cgroup_time ON cgroup (time);
CREATE INDEX cgroup_label_time ON cgroup (label, time);
CREATE TABLE node (
    time REAL NOT NULL, resolution REAL NOT NULL, mem_available INTEGER, swap_free INTEGER, oom_kills INTEGER,
    mem_total INTEGER, swap_total INTEGER, pressure_some REAL, pressure_full REAL
);
CREATE INDEX node_time ON node (time);
"""
_LABEL_COLUMNS = {"job": ("name",), "label": ("role", "rank", "local_rank", "comm"), "cgroup_label": ("path", "jobs")}
_TABLES = frozenset({"meta", "job", "label", "process", "cgroup_label", "cgroup", "node"})
_SAMPLE_TABLES = ("process", "cgroup", "node")
_SELECT_PROCESS = f"""SELECT p.time, p.resolution, p.pid, j.name, l.role, l.rank, l.local_rank, l.comm,
    {", ".join(f"p.{c}" for c in _PROCESS_SIZES)}
    FROM process AS p JOIN job AS j ON j.id = p.job JOIN label AS l ON l.id = p.label"""
_SELECT_CGROUP = f"""SELECT c.time, c.resolution, l.path, l.jobs, {", ".join(f"c.{x}" for x in _CGROUP_SIZES)},
    {", ".join(f"c.{x}" for x in _CGROUP_PRESSURE)}
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


class _Unusable(Exception):
    """The file is not one this version can write into: not a database, corrupt, or not ours."""


def _errorcode(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    return code & 0xFF if isinstance(code, int) else None


def _is_corrupt(exc: BaseException) -> bool:
    if isinstance(exc, _Unusable):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = _errorcode(exc)
    if code is not None:
        return code in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc)
    return "malformed" in text or "not a database" in text


def _utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


class HistoryStore:
    """The history file at ``path``, opened for writing (see ``open_readonly`` for readers)."""

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = 512 << 20,
        fine_seconds: float = 900.0,
        coarse_step: float = 10.0,
        max_age: float = 86400.0,
        notices: Notices | None = None,
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.fine_seconds = fine_seconds
        self.coarse_step = coarse_step
        self.max_age = max_age
        self.notices = notices if notices is not None else Notices()
        self._init_state(readonly=False)
        with self._lock:
            self._open()

    def _init_state(self, *, readonly: bool) -> None:
        self.readonly = readonly
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._said: set[str] = set()
        self._failing: str | None = None  # the notice key of the write problem in progress
        self._retry_at: float | None = None
        self._last_time: float | None = None
        self._interval = DEFAULT_RESOLUTION
        self._maintained_at: float | None = None
        self._folded_until: float | None = None  # fine rows before this were folded in this session
        self._labels_cleaned: float | None = None
        self._ids: dict[tuple[str, tuple[Any, ...]], int] = {}  # (table, label) -> id, of committed rows
        # pid -> when its smaps values last written were read: a reading is stored once, in the tick that
        # made it (a sample carries its last one on between reads; stored again, a climb reads as a plateau)
        self._smaps_written: dict[int, float | None] = {}
        # (connection, the (table, column)s of newer schemas its file lacks): older files read by a reader
        self._absent: tuple[sqlite3.Connection, set[tuple[str, str]]] | None = None

    # -- problems: said once, logged always ------------------------------------------------------

    def _say(self, key: str, message: str) -> None:
        if key in self._said:
            log.warning("%s", message)
        else:
            self._said.add(key)
            self.notices.say(key, message)  # logs it

    def _write_failed(self, key: str, message: str) -> None:
        if self._failing != key:
            self._failing = key
            self._say(key, message)

    def _write_ok(self) -> None:
        if self._failing is not None:
            log.info("history: recording to %s again", self.path)
            self._failing = None

    # -- opening -----------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.path), timeout=_BUSY_MS / 1000, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Check an existing file (raises _Unusable or a corrupt DatabaseError) or create the schema."""
        check = [str(row[0]) for row in conn.execute("PRAGMA quick_check(3)")]
        if check != ["ok"]:
            detail = "; ".join(line for c in check for line in c.splitlines() if line and not line.startswith("***"))
            raise _Unusable(f"integrity check failed: {detail[:200]}")
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            # small pages: a tick's rows touch a few pages of each table and index, and each touched page is
            # written whole to the WAL (and again at the checkpoint): 1 KiB halves what is written per tick
            conn.execute("PRAGMA page_size = 1024")  # before auto_vacuum, or it does not hold
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # before the first table, or it does not hold
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
            conn.execute("BEGIN")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [("format", FORMAT), ("schema_version", str(SCHEMA_VERSION)), ("created", str(time.time()))],
            )
            conn.execute("COMMIT")
        else:
            version = _check_ours(conn, tables)
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
            if version < SCHEMA_VERSION:
                _upgrade(conn, version)
                log.info("history: %s upgraded from schema %d to %d", self.path, version, SCHEMA_VERSION)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA journal_size_limit = {16 << 20}")

    def _open(self) -> None:
        """Open or create the file; a corrupt or foreign one is moved aside. Never raises."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._conn = self._open_checked()
            except (sqlite3.DatabaseError, _Unusable) as exc:
                if not _is_corrupt(exc):
                    raise
                moved = self._quarantine()
                self._say(
                    "history-corrupt",
                    f"history: {self.path} could not be used ({exc}); moved it to {moved.name} and started a new file",
                )
                self._conn = self._open_checked()
            settings = {"fine_seconds": self.fine_seconds, "coarse_step": self.coarse_step, "max_age": self.max_age,
                        "max_bytes": self.max_bytes}  # fmt: skip
            self._conn.executemany(
                "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [(k, repr(v)) for k, v in settings.items()]
            )  # for readers: which rows are coarse
            self._retry_at = None
            self._folded_until = None
            self._labels_cleaned = None
            self._ids.clear()
            if self._failing == "history-open":
                self._write_ok()
        except (sqlite3.Error, OSError, _Unusable) as exc:
            self._conn = None
            self._write_failed(
                "history-open",
                f"history: cannot open {self.path}: {exc}; not recording (trying again every minute)",
            )

    def _open_checked(self) -> sqlite3.Connection:
        conn = self._connect()
        try:
            self._prepare(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _quarantine(self) -> Path:
        """Move the file (and its WAL, under the matching name) aside; returns the new name."""
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        stamp = _utc_stamp()
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        n = 1
        while target.exists():
            n += 1
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}.{n}")
        if self.path.exists():
            os.replace(self.path, target)
        wal = self.path.with_name(self.path.name + "-wal")
        if wal.exists():
            os.replace(wal, target.with_name(target.name + "-wal"))  # stays with its file; never replayed here
        shm = self.path.with_name(self.path.name + "-shm")
        if shm.exists():
            shm.unlink()
        return target

    # -- writing -----------------------------------------------------------------------------------

    def record(self, tick: Tick) -> None:
        """Store one tick (one transaction). Never raises."""
        try:
            with self._lock:
                if self._record(tick):
                    due = self._maintained_at is None or not (
                        0 <= tick.time - self._maintained_at < MAINTAIN_EVERY
                    )  # a clock stepped back also makes it due
                    if due:
                        self.maintain(tick.time)
        except Exception as exc:  # a bug: logged with its traceback, never the agent's end
            log.exception("history: recording a tick failed")
            self._write_failed("history-bug", f"history: recording a tick failed: {exc!r}")

    def _fresh_smaps(self, tick: Tick) -> set[int]:
        """The job processes whose smaps values were read since they were last stored."""
        fresh: set[int] = set()
        seen: dict[int, float | None] = {}
        for p in tick.processes:
            if not p.in_job:
                continue
            seen[p.pid] = p.smaps_time
            # no time: a sample that does not say when its smaps values were read is stored as it is
            if p.smaps_time is None or self._smaps_written.get(p.pid) != p.smaps_time:
                fresh.add(p.pid)
        self._smaps_written = seen
        return fresh

    def _record(self, tick: Tick) -> bool:
        if self.readonly:
            return False
        if self._conn is None:
            if self._retry_at is not None and 0 <= self._retry_at - tick.time <= RETRY_OPEN_EVERY:
                return False
            self._open()
            if self._conn is None:
                self._retry_at = tick.time + RETRY_OPEN_EVERY
                return False
        if self._last_time is not None:
            delta = tick.time - self._last_time
            if 0 < delta <= 3600:
                self._interval = round(delta, 3)
        self._last_time = tick.time
        t, res = tick.time, self._interval
        node = tick.node
        conn = self._conn
        new_ids: dict[tuple[str, tuple[Any, ...]], int] = {}
        try:
            conn.execute("BEGIN")
            fresh = self._fresh_smaps(tick)
            processes = [
                (t, res, p.pid, self._id(new_ids, "job", (p.job,)),
                 self._id(new_ids, "label", (p.role, p.rank, p.local_rank, p.comm)),
                 p.rss, p.anon, p.file, p.shmem, p.swap, p.hwm,
                 *((p.pss, p.uss, p.swap_pss, p.rchar) if p.pid in fresh else (None, None, None, None)))
                for p in tick.processes
                if p.in_job
            ]  # fmt: skip
            cgroups = [
                (t, res, self._id(new_ids, "cgroup_label", (c.path, ",".join(c.jobs))),
                 c.usage, c.limit, c.effective_limit, c.anon, c.file, c.shmem, c.swap, c.oom_kills,
                 *_avg10(c.pressure))
                for c in tick.cgroups
            ]  # fmt: skip
            if processes:
                conn.executemany(_insert("process", ("time", "resolution", "pid", "job", "label", *_PROCESS_SIZES)),
                                 processes)  # fmt: skip
            if cgroups:
                conn.executemany(
                    _insert("cgroup", ("time", "resolution", "label", *_CGROUP_SIZES, *_CGROUP_PRESSURE)), cgroups
                )
            if node is not None:
                conn.execute(
                    _insert("node", _NODE_COLUMNS),
                    (t, res, node.mem_available, node.swap_free, node.oom_kills, node.mem_total, node.swap_total,
                     *_avg10(node.pressure)),
                )  # fmt: skip
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            self._failed(exc, "write")
            return False
        self._ids.update(new_ids)  # only now: a rolled-back transaction took its new ids with it
        self._write_ok()
        return True

    def _id(self, new_ids: dict[tuple[str, tuple[Any, ...]], int], table: str, label: tuple[Any, ...]) -> int:
        """The id of a label row (job, label, cgroup_label), inserted in the open transaction if new."""
        key = (table, label)
        found = self._ids.get(key)
        if found is None:
            found = new_ids.get(key)
        if found is not None:
            return found
        assert self._conn is not None
        columns = _LABEL_COLUMNS[table]
        where = " AND ".join(f"{c} IS ?" for c in columns)
        row = self._conn.execute(f"SELECT id FROM {table} WHERE {where}", label).fetchone()
        if row is None:
            cursor = self._conn.execute(_insert(table, columns), label)
            found = int(cursor.lastrowid or 0)
        else:
            found = int(row[0])
        new_ids[key] = found
        return found

    def _rollback(self) -> None:
        if self._conn is not None and self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def _failed(self, exc: sqlite3.Error, what: str) -> None:
        if _is_corrupt(exc):
            try:
                moved = self._quarantine()
            except OSError as move_exc:
                self._write_failed("history-open", f"history: {self.path} is corrupt ({exc}) and stays: {move_exc}")
                return
            self._say(
                "history-corrupt",
                f"history: {self.path} could not be used ({exc}); moved it to {moved.name} and started a new file",
            )
            self._open()
            return
        self._write_failed(
            f"history-{what}",
            f"history: cannot {what} {self.path}: {exc}; ticks are not recorded until it can (trying every tick)"
            if what == "write"
            else f"history: cannot {what} {self.path}: {exc}",
        )

    # -- bounds ------------------------------------------------------------------------------------

    def maintain(self, now: float | None = None) -> None:
        """Fold old fine rows into coarse buckets, drop rows older than max_age, keep the file under
        max_bytes. ``now`` is the time to measure ages from (default: the clock). Never raises."""
        now = time.time() if now is None else now
        with self._lock:
            if self.readonly or self._conn is None:
                return
            self._maintained_at = now
            try:
                self._fold(now)
                self._age(now)
                self._bound()
                self._conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('maintained', ?)", (repr(float(now)),)
                )
            except sqlite3.Error as exc:
                self._rollback()
                self._failed(exc, "maintain")

    def _fold(self, now: float) -> None:
        assert self._conn is not None
        step = float(self.coarse_step)
        cut = math.floor((now - self.fine_seconds) / step) * step  # a bucket boundary: no bucket is split
        low = self._folded_until
        if low is not None and cut <= low:
            return
        lo = -math.inf if low is None else low
        args = {"lo": lo, "cut": cut, "step": step}
        window = "time >= :lo AND time < :cut AND resolution < :step"
        maxes = ", ".join(f"MAX({c}) AS {c}" for c in _PROCESS_SIZES)
        cg_maxes = ", ".join(f"MAX({c})" for c in (*_CGROUP_SIZES, *_CGROUP_PRESSURE))
        conn = self._conn
        conn.execute("BEGIN")
        conn.execute(
            f"""WITH agg AS (
                    SELECT MIN(time) AS t0, MAX(rowid) AS last, {maxes}
                    FROM process WHERE {window} GROUP BY pid, job, CAST(time / :step AS INTEGER))
                INSERT INTO process (time, resolution, pid, job, label, {", ".join(_PROCESS_SIZES)})
                SELECT agg.t0, :step, p.pid, p.job, p.label, {", ".join(f"agg.{c}" for c in _PROCESS_SIZES)}
                FROM agg JOIN process AS p ON p.rowid = agg.last""",
            args,
        )  # the label (role, rank, comm) of the bucket's last row (rows are appended): the latest the sampler knew
        conn.execute(f"DELETE FROM process WHERE {window}", args)
        conn.execute(
            f"""INSERT INTO cgroup (time, resolution, label, {", ".join((*_CGROUP_SIZES, *_CGROUP_PRESSURE))})
                SELECT MIN(time), :step, label, {cg_maxes}
                FROM cgroup WHERE {window} GROUP BY label, CAST(time / :step AS INTEGER)""",
            args,
        )
        conn.execute(f"DELETE FROM cgroup WHERE {window}", args)
        conn.execute(
            f"""INSERT INTO node ({", ".join(_NODE_COLUMNS)})
                SELECT MIN(time), :step, MIN(mem_available), MIN(swap_free), MAX(oom_kills), MAX(mem_total),
                       MAX(swap_total), MAX(pressure_some), MAX(pressure_full)
                FROM node WHERE {window} GROUP BY CAST(time / :step AS INTEGER)""",
            args,
        )
        conn.execute(f"DELETE FROM node WHERE {window}", args)
        conn.execute("COMMIT")
        self._folded_until = cut

    def _age(self, now: float) -> None:
        assert self._conn is not None
        oldest = now - self.max_age
        conn = self._conn
        conn.execute("BEGIN")
        for table in _SAMPLE_TABLES:
            conn.execute(f"DELETE FROM {table} WHERE time < ?", (oldest,))
        scan = self._labels_cleaned is None or not 0 <= now - self._labels_cleaned < 3600
        self._clean_labels(scan=scan)
        if scan:
            self._labels_cleaned = now
        conn.execute("COMMIT")

    def _clean_labels(self, *, scan: bool = True) -> None:
        """Forget the jobs and cgroups no sample refers to any more (through their indexes: cheap),
        and with ``scan`` the process labels (a scan of the process table: once an hour)."""
        assert self._conn is not None
        self._conn.execute("DELETE FROM job WHERE NOT EXISTS (SELECT 1 FROM process WHERE process.job = job.id)")
        self._conn.execute(
            "DELETE FROM cgroup_label WHERE NOT EXISTS (SELECT 1 FROM cgroup WHERE cgroup.label = cgroup_label.id)"
        )
        if scan:
            self._conn.execute("DELETE FROM label WHERE id NOT IN (SELECT DISTINCT label FROM process)")
        self._ids.clear()

    def _pages(self) -> tuple[int, int, int]:
        """page size, page count, free pages."""
        assert self._conn is not None
        size = self._conn.execute("PRAGMA page_size").fetchone()[0]
        count = self._conn.execute("PRAGMA page_count").fetchone()[0]
        free = self._conn.execute("PRAGMA freelist_count").fetchone()[0]
        return int(size), int(count), int(free)

    def _bound(self) -> None:
        assert self._conn is not None
        page, count, _ = self._pages()
        if page * count <= self.max_bytes:
            return
        before = page * count
        target = 0.9 * self.max_bytes
        dropped_before: float | None = None
        for _ in range(16):
            page, count, free = self._pages()
            used = (count - free) * page
            if used > target:
                cutoff = self._drop_oldest(min(1.0, (used - target) / used + 0.02))
                if cutoff is None:
                    break
                dropped_before = cutoff
            # executescript steps the pragma to its end; execute() would free one page per call
            self._conn.executescript("PRAGMA incremental_vacuum;")
            page, count, _ = self._pages()
            if page * count <= target:
                break
        with contextlib.suppress(sqlite3.OperationalError):  # a reader holds the WAL: a later checkpoint shrinks it
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        log.info(
            "history: %s was %d bytes, over its bound of %d: dropped rows older than %s, now %d bytes",
            self.path,
            before,
            self.max_bytes,
            "-" if dropped_before is None else datetime.fromtimestamp(dropped_before).isoformat(timespec="seconds"),
            page * count,
        )

    def _drop_oldest(self, fraction: float) -> float | None:
        """Delete the oldest ``fraction`` of the rows (by the biggest table's times); returns the cutoff."""
        assert self._conn is not None
        counts = {t: self._conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in _SAMPLE_TABLES}
        table = max(counts, key=lambda t: counts[t])
        n = counts[table]
        if n == 0:
            return None
        k = min(n - 1, int(n * fraction))
        cutoff = self._conn.execute(f"SELECT time FROM {table} ORDER BY time LIMIT 1 OFFSET ?", (k,)).fetchone()[0]
        oldest = self._conn.execute(f"SELECT MIN(time) FROM {table}").fetchone()[0]
        op = "<=" if cutoff <= oldest else "<"  # always some progress
        self._conn.execute("BEGIN")
        for t in _SAMPLE_TABLES:
            self._conn.execute(f"DELETE FROM {t} WHERE time {op} ?", (cutoff,))
        self._clean_labels()
        self._conn.execute("COMMIT")
        return float(cutoff)

    def file_bytes(self) -> int:
        """The database's size in bytes (pages, free ones included; the WAL not counted)."""
        with self._lock:
            if self._conn is None:
                return 0
            page, count, _ = self._pages()
            return page * count

    # -- reading -----------------------------------------------------------------------------------

    def _query(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._conn is None:
                return []
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise InputError(f"cannot read history {self.path}: {exc}") from exc

    @staticmethod
    def _where(
        conditions: list[str], args: list[Any], since: float | None, until: float | None, prefix: str = ""
    ) -> str:
        if since is not None:
            conditions.append(f"{prefix}time >= ?")
            args.append(since)
        if until is not None:
            conditions.append(f"{prefix}time <= ?")
            args.append(until)
        return (" WHERE " + " AND ".join(conditions)) if conditions else ""

    def processes(
        self, *, job: str | None = None, pid: int | None = None, since: float | None = None, until: float | None = None
    ) -> list[ProcessRow]:
        """Process rows, oldest first (then by pid)."""
        conditions: list[str] = []
        args: list[Any] = []
        if job is not None:
            conditions.append("p.job = (SELECT id FROM job WHERE name = ?)")
            args.append(job)
        if pid is not None:
            conditions.append("p.pid = ?")
            args.append(pid)
        where = self._where(conditions, args, since, until, "p.")
        rows = self._query(f"{self._compatible(_SELECT_PROCESS)}{where} ORDER BY p.time, p.pid", args)
        return [ProcessRow(*r) for r in rows]

    def cgroups(
        self, *, path: str | None = None, since: float | None = None, until: float | None = None
    ) -> list[CgroupRow]:
        """Cgroup rows, oldest first (then by path)."""
        conditions: list[str] = []
        args: list[Any] = []
        if path is not None:
            conditions.append("c.label IN (SELECT id FROM cgroup_label WHERE path = ?)")
            args.append(path)
        where = self._where(conditions, args, since, until, "c.")
        rows = self._query(f"{self._compatible(_SELECT_CGROUP)}{where} ORDER BY c.time, l.path", args)
        return [CgroupRow(*r) for r in rows]

    def node(self, *, since: float | None = None, until: float | None = None) -> list[NodeRow]:
        """Node rows, oldest first."""
        args: list[Any] = []
        where = self._where([], args, since, until)
        select = self._compatible(f"SELECT {', '.join(f'node.{c}' for c in _NODE_COLUMNS)} FROM node")
        rows = self._query(f"{select}{where} ORDER BY time", args)
        return [NodeRow(*r) for r in rows]

    def _compatible(self, select: str) -> str:
        """``select`` with the columns an older file lacks read as NULL (a reader cannot upgrade it)."""
        with self._lock:
            conn = self._conn
            if conn is None:
                return select
            if self._absent is None or self._absent[0] is not conn:  # once per connection
                absent = set()
                try:
                    added = [a for _, cols in _ADDED for a in cols]
                    for table in {t for t, _, _ in added}:
                        present = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
                        absent |= {(t, c) for t, c, _ in added if t == table and c not in present}
                except sqlite3.Error:
                    return select
                self._absent = (conn, absent)
            for table, column in self._absent[1]:
                alias = {"cgroup": "c", "process": "p"}.get(table, table)
                select = select.replace(f"{alias}.{column}", f"NULL AS {column}")
        return select

    # -- meta --------------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        """Store a key. On a read-only store it raises ValueError; a write that fails is said as a
        notice, like a tick's."""
        if self.readonly:
            raise ValueError(f"history {self.path} is open read-only")
        with self._lock:
            if self._conn is None:
                return
            try:
                self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
            except sqlite3.Error as exc:
                self._failed(exc, "write")

    # -- closing -----------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            try:
                if not self.readonly:
                    conn.execute("PRAGMA optimize")
            except sqlite3.Error as exc:
                log.warning("history: closing %s: %s", self.path, exc)
            finally:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _insert(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"


def _avg10(pressure: Pressure | None) -> tuple[float | None, float | None]:
    """(some, full) avg10 percentages of a PSI reading."""
    if pressure is None:
        return None, None
    return (
        pressure.some.avg10 if pressure.some is not None else None,
        pressure.full.avg10 if pressure.full is not None else None,
    )


def _check_ours(conn: sqlite3.Connection, tables: set[str]) -> int:
    """The file's schema version (one this oomwatch reads), or raise _Unusable."""
    if "meta" not in tables:
        raise _Unusable("not an oomwatch history file (no meta table)")
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("format") != FORMAT:
        raise _Unusable("not an oomwatch history file")
    version = meta.get("schema_version")
    if version not in {str(v) for v in range(1, SCHEMA_VERSION + 1)}:
        raise _Unusable(f"history schema version {version}, this oomwatch reads 1 to {SCHEMA_VERSION}")
    missing = _TABLES - tables
    if missing:
        raise _Unusable(f"history file without its {', '.join(sorted(missing))} table")
    return int(version)


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Bring a file of an older schema to this one in one transaction: columns are added (old rows
    read them as unknown), nothing is rewritten."""
    conn.execute("BEGIN")
    try:
        for since, columns in _ADDED:
            if version < since:
                for table, column, kind in columns:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def open_readonly(path: Path) -> HistoryStore:
    """Open a history file for reading, also while the agent writes it. Raises InputError when it
    is missing or not a history file."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"no history at {path} (the agent writes it when it runs with history on)")
    if not path.is_file():
        raise InputError(f"{path} is not a history file (not a regular file)")
    if not os.access(path, os.R_OK):
        raise InputError(f"cannot read {path}: permission denied")
    store = HistoryStore.__new__(HistoryStore)
    store.path = path
    store.max_bytes = 0
    store.fine_seconds = store.coarse_step = store.max_age = 0.0
    store.notices = Notices()
    store._init_state(readonly=True)
    try:
        conn = _connect_readonly(path, immutable=False)
    except sqlite3.OperationalError as exc:
        # A reader without write access to the directory cannot create the -shm file that WAL readers
        # share; with no writer (no -wal file) nothing changes under it: read the file as it is.
        if path.with_name(path.name + "-wal").exists():
            raise InputError(f"cannot read {path}: {exc}") from exc
        try:
            conn = _connect_readonly(path, immutable=True)
        except (sqlite3.Error, _Unusable) as exc2:
            raise InputError(f"{path} is not a readable oomwatch history file: {exc2}") from exc2
    except (sqlite3.Error, _Unusable) as exc:
        raise InputError(f"{path} is not a readable oomwatch history file: {exc}") from exc
    store._conn = conn
    return store


def _connect_readonly(path: Path, *, immutable: bool) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro" + ("&immutable=1" if immutable else "")
    conn = sqlite3.connect(uri, uri=True, timeout=2.0, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 2000")
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        _check_ours(conn, tables)
    except BaseException:
        conn.close()
        raise
    return conn
