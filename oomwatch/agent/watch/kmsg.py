"""Watch ``/dev/kmsg`` for OOM kills, in a thread of its own, and hand each complete report on.

A report is complete at its ``Killed process`` line plus the reaper lines that follow within a
short quiet time (``SETTLE`` seconds without a new record). The sequence number of the last record
handled is kept in ``STATE_DIR/kmsg-position.json`` with the boot id: after a restart the watcher
reads the ring buffer from its start and skips what it already handled (no incident twice), and
handles what came while it was down (none missed, as long as the ring buffer still holds it). A new
boot starts from the beginning. Records overwritten before they were read are counted (``lost``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from oomwatch.agent.atomic import write_atomic
from oomwatch.agent.watch.spans import kill_reports
from oomwatch.paths import HostPaths
from oomwatch.procfs.bootid import read_boot_id
from oomwatch.procfs.kmsg import KmsgReader, KmsgRecord

log = logging.getLogger("oomwatch.agent")

SETTLE = 0.15  # seconds of quiet after a kill line before the report is handed on
KEEP = 4000  # records kept to find a report's header (a report is ~30-200 records)
POSITION_FILE = "kmsg-position.json"


class Position:
    """The last handled sequence number (``seq``) and the last one persisted (``saved``), which is
    written atomically (write, fsync, rename)."""

    def __init__(self, state_dir: Path, boot: str) -> None:
        self.path = state_dir / POSITION_FILE
        self.boot = boot
        self.seq = -1
        try:
            data = json.loads(self.path.read_text())
            if data.get("boot_id") == boot and isinstance(data.get("seq"), int):
                self.seq = data["seq"]
        except (OSError, ValueError, AttributeError):
            pass  # none yet, or unreadable: start from the buffer's beginning
        self.saved = self.seq

    def save(self, seq: int) -> None:
        self.seq = seq
        write_atomic(self.path, json.dumps({"boot_id": self.boot, "seq": seq}))
        self.saved = seq


class KmsgWatcher:
    def __init__(
        self,
        kmsg: Path,
        state_dir: Path,
        on_kill: Callable[[int, list[KmsgRecord]], object],
        proc: Path = Path("/proc"),
        durable: Callable[[], bool] = lambda: True,
    ) -> None:
        self.reader = KmsgReader(kmsg)  # OSError (PermissionError) when not readable: the caller says so
        self.position = Position(state_dir, read_boot_id(HostPaths(proc=proc)))
        self.on_kill = on_kill
        self.durable = durable  # whether every incident handed on is on disk: only then is the position saved
        self.stop_event = threading.Event()
        self.records: deque[KmsgRecord] = deque(maxlen=KEEP)
        self.kills_handled = 0
        self.thread = threading.Thread(target=self._run, name="oomwatch-kmsg", daemon=True)
        if self.position.seq < 0:
            # first start on this boot: the kills already in the buffer happened before we watched
            old = self.reader.read_available()
            if old:
                self._save(old[-1].seq)

    @property
    def lost(self) -> int:
        return self.reader.lost

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        self.thread.join(timeout=timeout)
        self.reader.close()

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._watch()
            except Exception:  # a bug must not end the watching for good: log it, start over
                log.exception("the kernel log watcher failed; restarting it")
                self.stop_event.wait(1.0)

    def _watch(self) -> None:
        fd = self.reader.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        pending_since: float | None = None  # when an unhandled kill line arrived
        while not self.stop_event.is_set():
            try:
                poller.poll(50 if pending_since is not None else 200)
                new = self.reader.read_available(after=self.position.seq)
            except OSError as exc:
                log.error("reading the kernel log failed: %s", exc)
                self.stop_event.wait(1.0)
                continue
            if new:
                self.records.extend(new)
                if any("Killed process" in r.text for r in new):
                    pending_since = time.monotonic()
                elif pending_since is not None:
                    pending_since = time.monotonic()  # the report is still being written: wait on
            if pending_since is not None and time.monotonic() - pending_since >= SETTLE:
                self._handle()
                pending_since = None
            elif not new and pending_since is None:
                # quiet, nothing pending: remember how far we are (no kill in what was read)
                last = self.records[-1].seq if self.records else self.position.seq
                if max(last, self.position.seq) > self.position.saved:
                    self._save(max(last, self.position.seq))

    def _handle(self) -> None:
        records = list(self.records)
        last_end = None
        for pid, report in kill_reports(records):
            kill_seq = report[-1].seq
            last_end = kill_seq
            if kill_seq <= self.position.seq:
                continue
            try:
                self.on_kill(pid, report)
            except Exception:  # an incident that cannot be written must not stop the watcher
                log.exception("writing the incident for pid %d failed", pid)
            self.kills_handled += 1
            self._save(kill_seq)
        if last_end is not None:
            # keep what a later report may still need (its header may already be here)
            rest = [r for r in records if r.seq > last_end]
            self.records.clear()
            self.records.extend(rest)

    def _save(self, seq: int) -> None:
        """Handled through ``seq``; persisted when every incident is on disk (else a restart reads the
        kills again, and those written are not written twice)."""
        self.position.seq = seq
        if self.durable():
            with contextlib.suppress(OSError):
                self.position.save(seq)
