"""Watch ``/dev/kmsg`` for OOM kills, in a thread of its own, and hand each complete report on.

A report is complete at its ``Killed process`` line plus the reaper lines that follow within a
short quiet time (``SETTLE`` seconds without a new record). The sequence number of the last record
handled is kept in ``STATE_DIR/kmsg-position.json`` with the boot id: after a restart the watcher
reads the ring buffer from its start and skips what it already handled (no incident twice), and
handles what came while it was down (none missed, as long as the ring buffer still holds it). A new
boot starts from the beginning. Records overwritten before they were read are counted (``lost``).
"""

from __future__ import annotations

import logging
import select
from collections import deque
from collections.abc import Callable
from pathlib import Path

from oomwatch.agent.watch.base import KEEP, KernelLogWatcher
from oomwatch.agent.watch.spans import kill_reports
from oomwatch.paths import HostPaths
from oomwatch.procfs.bootid import read_boot_id
from oomwatch.procfs.kmsg import KmsgReader, KmsgRecord

log = logging.getLogger("oomwatch.agent")

POSITION_FILE = "kmsg-position.json"


class KmsgWatcher(KernelLogWatcher):
    thread_name = "oomwatch-kmsg"
    position_file = POSITION_FILE

    def __init__(
        self,
        kmsg: Path,
        state_dir: Path,
        on_kill: Callable[[int, list[KmsgRecord]], object],
        proc: Path = Path("/proc"),
        durable: Callable[[], bool] = lambda: True,
    ) -> None:
        self.reader = KmsgReader(kmsg)  # OSError (PermissionError) when not readable: the caller says so
        super().__init__(state_dir, on_kill, durable)
        self.boot = read_boot_id(HostPaths(proc=proc))
        self.seq = -1  # the last sequence number handled
        data = self._load_position()
        if data is not None and data.get("boot_id") == self.boot and isinstance(data.get("seq"), int):
            self.seq = data["seq"]  # else none yet, unreadable, or another boot: from the buffer's beginning
        self.saved = self.seq  # the last one persisted
        self.records: deque[KmsgRecord] = deque(maxlen=KEEP)
        if self.seq < 0:
            # first start on this boot: the kills already in the buffer happened before we watched
            old = self.reader.read_available()
            if old:
                self._save(old[-1].seq)

    @property
    def lost(self) -> int:
        return self.reader.lost

    def _close(self) -> None:
        self.reader.close()

    def _failed(self) -> str:
        return "the kernel log watcher failed; restarting it"

    def _watch(self) -> None:
        fd = self.reader.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        self.settle.reset()
        while not self.stop_event.is_set():
            try:
                poller.poll(50 if self.settle.pending else 200)
                new = self.reader.read_available(after=self.seq)
            except OSError as exc:
                log.error("reading the kernel log failed: %s", exc)
                self.stop_event.wait(1.0)
                continue
            if new:
                self.records.extend(new)
                self.settle.saw([r.text for r in new])
            if self.settle.due():
                self._handle()
                self.settle.reset()
            elif not new and not self.settle.pending:
                # quiet, nothing pending: remember how far we are (no kill in what was read)
                last = self.records[-1].seq if self.records else self.seq
                if max(last, self.seq) > self.saved:
                    self._save(max(last, self.seq))

    def _handle(self) -> None:
        records = list(self.records)
        last_end = None
        for pid, report in kill_reports(records):
            kill_seq = report[-1].seq
            last_end = kill_seq
            if kill_seq <= self.seq:
                continue
            self._hand_on(pid, report)
            self._save(kill_seq)
        if last_end is not None:
            # keep what a later report may still need (its header may already be here)
            rest = [r for r in records if r.seq > last_end]
            self.records.clear()
            self.records.extend(rest)

    def _save(self, seq: int) -> None:
        """Handled through ``seq``; persisted when every incident is on disk."""
        self.seq = seq
        if self._store_position({"boot_id": self.boot, "seq": seq}):
            self.saved = seq
