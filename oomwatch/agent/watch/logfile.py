"""Follow a kernel log *file* for OOM kills, when ``/dev/kmsg`` cannot be read: ``/var/log/kern.log``,
a syslog file, or ``journalctl -k -f -o short-monotonic > FILE`` written by something else.

Lines are handed to the same report splitter as kmsg records (``agent.watch.spans.kill_spans``) and
to the same engine (the prefix of each line — syslog, journal, dmesg — is stripped there). The
position (the file's device and inode, and the byte offset) is kept in
``STATE_DIR/logfile-position.json``: after a restart the file is read on from there (no kill
missed, none twice); a rotated file (another inode, or shorter than the offset) is read from its
start; on the first start, what is already in the file is skipped.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from oomwatch.agent.atomic import write_atomic
from oomwatch.agent.watch.spans import kill_spans

log = logging.getLogger("oomwatch.agent")

POLL = 0.1  # seconds between looks at the file
SETTLE = 0.15  # seconds of quiet after a kill line before the report is handed on
KEEP = 4000  # lines kept to find a report's header
POSITION_FILE = "logfile-position.json"
READ = 1 << 20


class LogFileWatcher:
    def __init__(
        self,
        path: Path,
        state_dir: Path,
        on_kill: Callable[[int, list[str]], object],
        durable: Callable[[], bool] = lambda: True,
    ) -> None:
        self.path = path
        self.on_kill = on_kill
        self.durable = durable  # whether every incident handed on is on disk: only then is the offset saved
        self.position_path = state_dir / POSITION_FILE
        self.stop_event = threading.Event()
        self.lines: deque[str] = deque(maxlen=KEEP)
        self.kills_handled = 0
        self._partial = b""
        self._ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the file being read
        self._offset = 0
        self._handled_offset = 0  # where the last handled report ended: what a restart resumes from
        self._saved_offset = -1  # the offset last persisted
        self._load_position()
        self.thread = threading.Thread(target=self._run, name="oomwatch-kernel-log", daemon=True)

    def _load_position(self) -> None:
        st = os.stat(self.path)  # OSError when missing or unreadable: the caller says so
        with open(self.path, "rb"):
            pass  # readable?
        try:
            data = json.loads(self.position_path.read_text())
            ident = (int(data["dev"]), int(data["ino"]))
            offset = int(data["offset"])
        except (OSError, ValueError, KeyError, TypeError):
            self._ident, self._offset = (st.st_dev, st.st_ino), st.st_size  # first start: skip the past
            self._save(st.st_size)
            return
        if ident == (st.st_dev, st.st_ino) and offset <= st.st_size:
            self._ident, self._offset = ident, offset
        else:
            self._ident, self._offset = (st.st_dev, st.st_ino), 0  # rotated while we were down
        self._handled_offset = self._saved_offset = self._offset

    def _save(self, offset: int) -> None:
        """Handled through ``offset``; persisted when every incident is on disk (else a restart reads
        the kills again, and those written are not written twice)."""
        if self._ident is None:
            return
        self._handled_offset = offset
        if not self.durable():
            return
        position = {"path": str(self.path), "dev": self._ident[0], "ino": self._ident[1], "offset": offset}
        with contextlib.suppress(OSError):
            write_atomic(self.position_path, json.dumps(position))
            self._saved_offset = offset

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        self.thread.join(timeout=timeout)

    def _run(self) -> None:
        pending_since: float | None = None
        while not self.stop_event.is_set():
            try:
                new = self._read_new()
            except Exception:  # a bug or an odd file must not end the watching for good
                log.exception("following %s failed; trying again", self.path)
                self.stop_event.wait(1.0)
                continue
            if new:
                self.lines.extend(new)
                if pending_since is not None or any("Killed process" in line for line in new):
                    pending_since = time.monotonic()
            if pending_since is not None and time.monotonic() - pending_since >= SETTLE:
                self._handle()
                pending_since = None
            elif pending_since is None and not new and self._offset != self._saved_offset and not self._partial:
                self._save(self._offset)  # quiet, nothing pending: remember how far we are
            self.stop_event.wait(POLL)

    def _read_new(self) -> list[str]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return []  # between a rotation's rename and the new file
        if (st.st_dev, st.st_ino) != self._ident or st.st_size < self._offset:
            self._ident, self._offset, self._partial = (st.st_dev, st.st_ino), 0, b""  # rotated or truncated
        if st.st_size == self._offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read(READ)
        self._offset += len(data)
        data = self._partial + data
        complete, _, self._partial = data.rpartition(b"\n")
        if not complete and not _:
            return []
        return complete.decode("utf-8", "replace").split("\n")

    def _handle(self) -> None:
        lines = list(self.lines)
        spans = kill_spans(lines)
        for pid, a, b in spans:
            try:
                self.on_kill(pid, lines[a : b + 1])
            except Exception:  # an incident that cannot be written must not stop the watcher
                log.exception("writing the incident for pid %d failed", pid)
            self.kills_handled += 1
        if spans:
            rest = lines[spans[-1][2] + 1 :]
            self.lines.clear()
            self.lines.extend(rest)
            if not rest and not self._partial:
                self._save(self._offset)
