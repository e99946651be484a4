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
import os
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from oomwatch.agent.history import bounds
from oomwatch.agent.history.reader import HistoryReader
from oomwatch.agent.history.schema import (
    CGROUP_PEAKS,
    CGROUP_PRESSURE,
    CGROUP_SIZES,
    LABEL_COLUMNS,
    NODE_COLUMNS,
    PROCESS_SIZES,
    STEP_COLUMNS,
    Unusable,
    insert,
    is_corrupt,
    prepare,
)
from oomwatch.agent.sample.notices import Notices
from oomwatch.agent.tick import Tick
from oomwatch.procfs.pressure import Pressure

log = logging.getLogger("oomwatch.agent")

MAINTAIN_EVERY = 60.0  # seconds of tick time between maintenance runs started by record()
RETRY_OPEN_EVERY = 60.0  # seconds of tick time between attempts to open a file that could not be opened
DEFAULT_RESOLUTION = 1.0  # the agent's default interval: the first tick's resolution, before a second one says
_BUSY_MS = 500


def _utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


class HistoryStore(HistoryReader):
    """The history file at ``path``, opened for writing (see ``history.reader.open_readonly`` for readers)."""

    readonly = False

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
        super().__init__(path)
        self.max_bytes = max_bytes
        self.fine_seconds = fine_seconds
        self.coarse_step = coarse_step
        self.max_age = max_age
        self.notices = notices if notices is not None else Notices()
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
        with self._lock:
            self._open()

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

    def _open(self) -> None:
        """Open or create the file; a corrupt or foreign one is moved aside. Never raises."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._conn = self._open_checked()
            except (sqlite3.DatabaseError, Unusable) as exc:
                if not is_corrupt(exc):
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
        except (sqlite3.Error, OSError, Unusable) as exc:
            self._conn = None
            self._write_failed(
                "history-open",
                f"history: cannot open {self.path}: {exc}; not recording (trying again every minute)",
            )

    def _open_checked(self) -> sqlite3.Connection:
        conn = self._connect()
        try:
            prepare(conn, self.path)
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
                 *((p.pss, p.uss, p.swap_pss, p.rchar) if p.pid in fresh else (None, None, None, None)),
                 p.anon_peak)
                for p in tick.processes
                if p.in_job
            ]  # fmt: skip
            cgroups = [
                (t, res, self._id(new_ids, "cgroup_label", (c.path, ",".join(c.jobs))),
                 c.usage, c.limit, c.effective_limit, c.anon, c.file, c.shmem, c.swap, c.oom_kills,
                 *_avg10(c.pressure), c.unreclaimable_peak)
                for c in tick.cgroups
            ]  # fmt: skip
            if processes:
                conn.executemany(insert("process", ("time", "resolution", "pid", "job", "label", *PROCESS_SIZES)),
                                 processes)  # fmt: skip
            if cgroups:
                conn.executemany(
                    insert("cgroup", ("time", "resolution", "label", *CGROUP_SIZES, *CGROUP_PRESSURE, *CGROUP_PEAKS)),
                    cgroups,
                )
            steps = [(m.time, res, self._id(new_ids, "job", (m.job,)), m.rule, m.name, m.total, m.step)
                     for m in tick.steps]  # fmt: skip
            if steps:
                conn.executemany(insert("step", STEP_COLUMNS), steps)
            if node is not None:
                conn.execute(
                    insert("node", NODE_COLUMNS),
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
        columns = LABEL_COLUMNS[table]
        where = " AND ".join(f"{c} IS ?" for c in columns)
        row = self._conn.execute(f"SELECT id FROM {table} WHERE {where}", label).fetchone()
        if row is None:
            cursor = self._conn.execute(insert(table, columns), label)
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
        if is_corrupt(exc):
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

    # -- bounds ------------------------------------------------------------------------------------

    def maintain(self, now: float | None = None) -> None:
        """Fold old fine rows into coarse buckets, drop rows older than max_age, keep the file under
        max_bytes. ``now`` is the time to measure ages from (default: the clock). Never raises."""
        now = time.time() if now is None else now
        with self._lock:
            if self._conn is None:
                return
            self._maintained_at = now
            conn = self._conn
            try:
                self._folded_until = bounds.fold(conn, now, self.fine_seconds, self.coarse_step, self._folded_until)
                scan = self._labels_cleaned is None or not 0 <= now - self._labels_cleaned < 3600
                bounds.age(conn, now - self.max_age, scan_labels=scan)
                if scan:
                    self._labels_cleaned = now
                bounds.bound(conn, self.max_bytes, self.path)
                conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('maintained', ?)", (repr(float(now)),))
            except sqlite3.Error as exc:
                self._rollback()
                self._failed(exc, "maintain")
            finally:
                self._ids.clear()  # labels may have been forgotten: their ids are looked up again

    def file_bytes(self) -> int:
        """The database's size in bytes (pages, free ones included; the WAL not counted)."""
        with self._lock:
            if self._conn is None:
                return 0
            page, count, _ = bounds.pages(self._conn)
            return page * count

    def set_meta(self, key: str, value: str) -> None:
        """Store a key. A write that fails is said as a notice, like a tick's."""
        with self._lock:
            if self._conn is None:
                return
            try:
                self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
            except sqlite3.Error as exc:
                self._failed(exc, "write")


def _avg10(pressure: Pressure | None) -> tuple[float | None, float | None]:
    """(some, full) avg10 percentages of a PSI reading."""
    if pressure is None:
        return None, None
    return (
        pressure.some.avg10 if pressure.some is not None else None,
        pressure.full.avg10 if pressure.full is not None else None,
    )
