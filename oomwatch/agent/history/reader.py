"""Reading the history back: rows of processes, cgroups, the node and the jobs' step counters by job, pid, path
and time, also from a file the agent is writing (WAL readers), or from an older schema's file (the columns and
tables it lacks read as unknown or empty).

``open_readonly`` is how ``oomwatch history`` and ``diagnose --history`` open it; the agent's own store
(``history.store.HistoryStore``) reads through the same methods.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from oomwatch.agent.history.schema import (
    ADDED,
    NODE_COLUMNS,
    SELECT_CGROUP,
    SELECT_PROCESS,
    SELECT_STEP,
    CgroupRow,
    NodeRow,
    ProcessRow,
    StepRow,
    Unusable,
    check_ours,
)
from oomwatch.agent.tick import Tick
from oomwatch.errors import InputError

log = logging.getLogger("oomwatch.agent")

_R = TypeVar("_R", bound="HistoryReader")


class HistoryReader:
    """A history file open for reading (made by ``open_readonly``). It records nothing."""

    readonly = True

    def __init__(self, path: Path, conn: sqlite3.Connection | None = None) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._conn = conn
        # (connection, the (table, column)s of newer schemas its file lacks): older files read by a reader
        self._absent: tuple[sqlite3.Connection, set[tuple[str, str]]] | None = None

    def record(self, tick: Tick) -> None:
        """A reader records nothing (and does not raise)."""

    def set_meta(self, key: str, value: str) -> None:
        raise ValueError(f"history {self.path} is open read-only")

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
        rows = self._query(f"{self._compatible(SELECT_PROCESS)}{where} ORDER BY p.time, p.pid", args)
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
        rows = self._query(f"{self._compatible(SELECT_CGROUP)}{where} ORDER BY c.time, l.path", args)
        return [CgroupRow(*r) for r in rows]

    def node(self, *, since: float | None = None, until: float | None = None) -> list[NodeRow]:
        """Node rows, oldest first."""
        args: list[Any] = []
        where = self._where([], args, since, until)
        select = self._compatible(f"SELECT {', '.join(f'node.{c}' for c in NODE_COLUMNS)} FROM node")
        rows = self._query(f"{select}{where} ORDER BY time", args)
        return [NodeRow(*r) for r in rows]

    def steps(self, *, job: str, since: float | None = None, until: float | None = None) -> list[StepRow]:
        """A job's step counter rows (agent.steps), oldest first; none from a file older than schema 4."""
        with self._lock:
            conn = self._conn
            try:
                present = conn is not None and bool(
                    conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'step'").fetchone()
                )
            except sqlite3.Error as exc:
                raise InputError(f"cannot read history {self.path}: {exc}") from exc
        if not present:
            return []
        args: list[Any] = [job]
        where = self._where(["s.job = (SELECT id FROM job WHERE name = ?)"], args, since, until, "s.")
        rows = self._query(f"{SELECT_STEP}{where} ORDER BY s.time, s.rowid", args)
        return [StepRow(*r) for r in rows]

    def _compatible(self, select: str) -> str:
        """``select`` with the columns an older file lacks read as NULL (a reader cannot upgrade it)."""
        with self._lock:
            conn = self._conn
            if conn is None:
                return select
            if self._absent is None or self._absent[0] is not conn:  # once per connection
                absent = set()
                try:
                    added = [a for _, cols in ADDED for a in cols]
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

    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

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

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def open_readonly(path: Path) -> HistoryReader:
    """Open a history file for reading, also while the agent writes it. Raises InputError when it
    is missing or not a history file."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"no history at {path} (the agent writes it when it runs with history on)")
    if not path.is_file():
        raise InputError(f"{path} is not a history file (not a regular file)")
    if not os.access(path, os.R_OK):
        raise InputError(f"cannot read {path}: permission denied")
    try:
        conn = _connect_readonly(path, immutable=False)
    except sqlite3.OperationalError as exc:
        # A reader without write access to the directory cannot create the -shm file that WAL readers
        # share; with no writer (no -wal file) nothing changes under it: read the file as it is.
        if path.with_name(path.name + "-wal").exists():
            raise InputError(f"cannot read {path}: {exc}") from exc
        try:
            conn = _connect_readonly(path, immutable=True)
        except (sqlite3.Error, Unusable) as exc2:
            raise InputError(f"{path} is not a readable oomwatch history file: {exc2}") from exc2
    except (sqlite3.Error, Unusable) as exc:
        raise InputError(f"{path} is not a readable oomwatch history file: {exc}") from exc
    return HistoryReader(path, conn)


def _connect_readonly(path: Path, *, immutable: bool) -> sqlite3.Connection:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro" + ("&immutable=1" if immutable else "")
    conn = sqlite3.connect(uri, uri=True, timeout=2.0, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 2000")
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        check_ours(conn, tables)
    except BaseException:
        conn.close()
        raise
    return conn
