"""Follow the kernel's messages in the systemd journal for OOM kills, when ``/dev/kmsg`` cannot be read
(a container without CAP_SYSLOG where ``kernel.dmesg_restrict=1``, but with the journal mounted).

Runs ``journalctl -k -f -o json`` as a child process and reads its output: each entry's ``MESSAGE``
becomes a dmesg-style line stamped with the kernel's own time (``_SOURCE_MONOTONIC_TIMESTAMP``), and
the lines go to the same report splitter as kmsg records (``agent.watch.spans.kill_spans``) and to the
same engine. The journal cursor of the last handled entry is kept in
``STATE_DIR/journal-position.json``: after a restart ``--after-cursor`` resumes there (no kill
missed, none twice); on the first start only new entries are read. If journalctl ends (journald
restarted, a vacuum), it is started again from the cursor after a pause.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from oomwatch.agent.watch.base import KEEP, KernelLogWatcher
from oomwatch.agent.watch.killid import kernel_kill_id
from oomwatch.agent.watch.spans import kill_spans

log = logging.getLogger("oomwatch.agent")

POSITION_FILE = "journal-position.json"
RESTART_AFTER = 2.0  # seconds before journalctl is started again when it ended
JOURNAL = "journal"  # the --kernel-log value that selects this watcher


@dataclass(frozen=True)
class JournalLine:
    text: str  # "[   12.345678] message", the kernel's time when the journal has it
    cursor: str
    kernel_time: float | None  # seconds on the kernel's monotonic clock
    usec: int | None = None  # the same, in the kernel's microseconds (a kill's identity, with the boot)
    boot: str = ""  # the boot id the journal files the entry under


def parse_entry(raw: bytes) -> JournalLine | None:
    """One line of ``journalctl -o json``; None for what is not a usable entry."""
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    message, cursor = entry.get("MESSAGE"), entry.get("__CURSOR")
    if isinstance(message, list):  # not valid UTF-8: journalctl gives the bytes as numbers
        try:
            message = bytes(message).decode("utf-8", "replace")
        except (TypeError, ValueError):
            return None
    if not isinstance(message, str) or not isinstance(cursor, str):
        return None
    usec = entry.get("_SOURCE_MONOTONIC_TIMESTAMP") or entry.get("__MONOTONIC_TIMESTAMP")
    try:
        micros = int(usec) if usec is not None else None
    except (TypeError, ValueError):
        micros = None
    if micros is not None and not 0 <= micros < 1 << 63:
        micros = None
    t = micros / 1e6 if micros is not None else None
    boot = entry.get("_BOOT_ID")
    # one entry can hold several lines (rare for the kernel): keep them as the lines they were
    text = "\n".join(f"[{t:12.6f}] {part}" if t is not None else part for part in message.splitlines() or [""])
    return JournalLine(text, cursor, t, micros, boot if isinstance(boot, str) else "")


def journal_command(cursor: str | None, journalctl: str = "journalctl") -> list[str]:
    where = ["--after-cursor", cursor, "--lines", "all"] if cursor else ["--lines", "0"]
    return [journalctl, "--dmesg", "--follow", "--output", "json", "--no-pager", "--quiet", *where]


def newest_cursor(journalctl: str) -> str | None:
    """The cursor of the journal's newest kernel message, or None (none, or journalctl failed)."""
    try:
        done = subprocess.run([journalctl, "--dmesg", "--lines", "1", "--output", "json", "--no-pager", "--quiet"],
                              capture_output=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines() if done.returncode == 0 else []
    entry = parse_entry(lines[-1]) if lines else None
    return entry.cursor if entry is not None else None


def journal_readable(journalctl: str | None = None) -> str | None:
    """None when ``journalctl -k`` can be run and reads a journal; else why not, in words."""
    exe = journalctl or shutil.which("journalctl")
    if exe is None:
        return "journalctl is not installed"
    try:
        done = subprocess.run([exe, "--dmesg", "--lines", "1", "--no-pager", "--quiet", "--output", "cat"],
                              capture_output=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"journalctl could not run: {exc}"
    if done.returncode != 0:
        return f"journalctl -k failed: {done.stderr.decode(errors='replace').strip()[:200]}"
    if not done.stdout.strip():
        return "the journal holds no kernel messages (journald not running, or not reading the kernel's)"
    return None


class JournalWatcher(KernelLogWatcher):
    thread_name = "oomwatch-journal"
    position_file = POSITION_FILE
    restart_after = RESTART_AFTER

    def __init__(
        self,
        state_dir: Path,
        on_kill: Callable[..., object],
        journalctl: str | None = None,
        durable: Callable[[], bool] = lambda: True,
    ) -> None:
        exe = journalctl or shutil.which("journalctl")
        if exe is None:
            raise FileNotFoundError("journalctl is not installed")
        super().__init__(state_dir, on_kill, durable)
        self.journalctl = exe
        data = self._load_position()
        cursor = data.get("cursor") if data is not None else None
        self.cursor = cursor if isinstance(cursor, str) and cursor else None  # the last entry handled
        self.saved = self.cursor  # the last one persisted
        if self.cursor is None:
            # first start: the kills already in the journal happened before we watched; from its newest
            # entry on, nothing is missed (also when this agent is killed before it has read one)
            newest = newest_cursor(self.journalctl)
            if newest is not None:
                self._save(newest)
        self.lines: deque[JournalLine] = deque(maxlen=KEEP)
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def _save(self, cursor: str) -> None:
        """Handled through ``cursor``; persisted when every incident is on disk."""
        self.cursor = cursor
        if self._store_position({"cursor": cursor}):
            self.saved = cursor

    def _interrupt(self) -> None:
        with self._lock:
            proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()  # our own child, by its pid

    def _failed(self) -> str:
        return "following the journal failed; starting again"

    def _watch(self) -> None:
        command = journal_command(self.cursor, self.journalctl)
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        with self._lock:
            self._proc = proc
        try:
            self._read(proc)
        finally:
            _end(proc)

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        """Hand on the reports in journalctl's output until it ends or the watcher stops."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        partial = b""
        self.settle.reset()
        read_cursor: str | None = None  # the newest entry read
        while not self.stop_event.is_set():
            ready, _, _ = select.select([fd], [], [], 0.05 if self.settle.pending else 0.2)
            ended = False
            chunk = b""
            if ready:
                with contextlib.suppress(BlockingIOError):
                    chunk = os.read(fd, 1 << 20)
                    ended = not chunk  # readable and empty: journalctl closed its output
            new, partial = _entries(partial, chunk)
            if new:
                self.lines.extend(new)
                read_cursor = new[-1].cursor
                self.settle.saw([e.text for e in new])
            if self.settle.pending and (ended or self.settle.due()):
                self._handle()
                self.settle.reset()
            elif not new and not self.settle.pending and read_cursor and self.saved != read_cursor:
                self._save(read_cursor)  # quiet, nothing pending: remember how far we are
            if ended:
                err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
                log.warning("journalctl ended (exit %s)%s; starting it again", proc.wait(),
                            f": {err[:300]}" if err else "")  # fmt: skip
                return

    def _handle(self) -> None:
        entries = list(self.lines)
        texts: list[str] = []
        owner: list[int] = []  # for each line, the index of its entry
        for i, e in enumerate(entries):
            for line in e.text.split("\n"):
                texts.append(line)
                owner.append(i)
        spans = kill_spans(texts)
        for pid, a, b in spans:
            kill_line = next(i for i in range(a, b + 1) if "Killed process" in texts[i])
            entry = entries[owner[kill_line]]
            kill_id = kernel_kill_id(entry.boot, entry.usec, pid) if entry.usec is not None and entry.boot else None
            self._hand_on(pid, texts[a : b + 1], kernel_time=entry.kernel_time, kill_id=kill_id)
            self._save(entries[owner[b]].cursor)
        if spans:
            rest = entries[owner[spans[-1][2]] + 1 :]
            self.lines.clear()
            self.lines.extend(rest)


def _entries(partial: bytes, chunk: bytes) -> tuple[list[JournalLine], bytes]:
    """The whole entries in what was left over and a new chunk of output, and what is left over now."""
    if not chunk:
        return [], partial
    complete, sep, partial = (partial + chunk).rpartition(b"\n")
    new = [entry for raw in (complete.split(b"\n") if sep else []) if (entry := parse_entry(raw)) is not None]
    return new, partial


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End journalctl (our own child, by its pid) if it still runs, and close its pipes."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
