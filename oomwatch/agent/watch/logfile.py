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

import os
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oomwatch.agent.watch.base import KEEP, KernelLogWatcher
from oomwatch.agent.watch.spans import kill_spans

POLL = 0.1  # seconds between looks at the file
POSITION_FILE = "logfile-position.json"
READ = 1 << 20


def _position(data: dict[str, Any] | None) -> tuple[tuple[int, int], int] | None:
    """((st_dev, st_ino), offset) from a persisted position, None when it does not hold them."""
    if data is None:
        return None
    try:
        return (int(data["dev"]), int(data["ino"])), int(data["offset"])
    except (ValueError, KeyError, TypeError):
        return None


class LogFileWatcher(KernelLogWatcher):
    thread_name = "oomwatch-kernel-log"
    position_file = POSITION_FILE

    def __init__(
        self,
        path: Path,
        state_dir: Path,
        on_kill: Callable[[int, list[str]], object],
        durable: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(state_dir, on_kill, durable)
        self.path = path
        self.lines: deque[str] = deque(maxlen=KEEP)
        self._partial = b""
        self._ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the file being read
        self._offset = 0
        self._handled_offset = 0  # where the last handled report ended: what a restart resumes from
        self._saved_offset = -1  # the offset last persisted
        self._resume()

    def _resume(self) -> None:
        st = os.stat(self.path)  # OSError when missing or unreadable: the caller says so
        with open(self.path, "rb"):
            pass  # readable?
        saved = _position(self._load_position())
        if saved is None:
            self._ident, self._offset = (st.st_dev, st.st_ino), st.st_size  # first start: skip the past
            self._save(st.st_size)
            return
        ident, offset = saved
        if ident == (st.st_dev, st.st_ino) and offset <= st.st_size:
            self._ident, self._offset = ident, offset
        else:
            self._ident, self._offset = (st.st_dev, st.st_ino), 0  # rotated while we were down
        self._handled_offset = self._saved_offset = self._offset

    def _save(self, offset: int) -> None:
        """Handled through ``offset``; persisted when every incident is on disk."""
        if self._ident is None:
            return
        self._handled_offset = offset
        position = {"path": str(self.path), "dev": self._ident[0], "ino": self._ident[1], "offset": offset}
        if self._store_position(position):
            self._saved_offset = offset

    def _failed(self) -> str:
        return f"following {self.path} failed; trying again"

    def _watch(self) -> None:
        while not self.stop_event.is_set():
            new = self._read_new()  # a bug or an odd file raises: the watching starts again
            if new:
                self.lines.extend(new)
                self.settle.saw(new)
            if self.settle.due():
                self._handle()
                self.settle.reset()
            elif not self.settle.pending and not new and self._offset != self._saved_offset and not self._partial:
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
            self._hand_on(pid, lines[a : b + 1])
        if spans:
            rest = lines[spans[-1][2] + 1 :]
            self.lines.clear()
            self.lines.extend(rest)
            if not rest and not self._partial:
                self._save(self._offset)
