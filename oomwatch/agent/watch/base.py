"""What the three followers of the kernel's log (``/dev/kmsg``, the journal, a kernel log file) share: a
thread of their own, started again after an error; their position, kept in a state file so that a
restart neither misses a kill nor reports one twice; the settle time before a report is handed on; and
the handing on itself.

A follower says how to read (``_watch``, run again after it returns or raises, ``restart_after``
seconds later, until ``stop``) and what its position is (a JSON object in ``STATE_DIR/<position_file>``).
The position is persisted only while every incident handed on is on disk (``durable``): else a restart
reads the kills again, and those already written are not written twice.

The process exits watcher (``exits.ExitWatcher``) is not one of these: it keeps no position (an exit
happens once, now), hands each event on at once, and ends for good when its socket fails.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oomwatch.agent.atomic import write_atomic

log = logging.getLogger("oomwatch.agent")

SETTLE = 0.15  # seconds of quiet after a kill line before the report is handed on
KEEP = 4000  # records, entries or lines kept to find a report's header (a report is ~30-200)
KILL_MARK = "Killed process"  # the line that completes a report (with the reaper lines after it)


class Settle:
    """The quiet time after a kill line: a report is handed on once nothing came for ``SETTLE`` seconds."""

    def __init__(self) -> None:
        self.since: float | None = None  # when the newest line of a report not yet handed on came

    @property
    def pending(self) -> bool:
        return self.since is not None

    def saw(self, texts: list[str]) -> None:
        """New lines came: a kill line starts the wait, and any line while waiting starts it again."""
        if self.since is not None or any(KILL_MARK in text for text in texts):
            self.since = time.monotonic()

    def due(self) -> bool:
        return self.since is not None and time.monotonic() - self.since >= SETTLE

    def reset(self) -> None:
        self.since = None


class KernelLogWatcher:
    """The thread, the restart, the position file and the handing on of one follower of the kernel's log."""

    thread_name = "oomwatch-kernel-log"
    restart_after = 1.0  # seconds before ``_watch`` runs again after it ended
    position_file = "position.json"

    def __init__(self, state_dir: Path, on_kill: Callable[..., object], durable: Callable[[], bool]) -> None:
        self.on_kill = on_kill
        self.durable = durable  # whether every incident handed on is on disk: only then is the position saved
        self.position_path = state_dir / self.position_file
        self.stop_event = threading.Event()
        self.settle = Settle()
        self.kills_handled = 0
        self.restarts = 0
        self.thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        self._interrupt()
        self.thread.join(timeout=timeout)
        self._close()

    def _interrupt(self) -> None:
        """Make a blocked ``_watch`` return (called on stop, from another thread)."""

    def _close(self) -> None:
        """Release what the follower holds open (after its thread ended, or did not in time)."""

    def _failed(self) -> str:
        """What the log says when ``_watch`` raised."""
        raise NotImplementedError

    def _watch(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._watch()
            except Exception:  # a bug, or an odd input, must not end the watching for good
                log.exception(self._failed())
            if not self.stop_event.is_set():
                self.restarts += 1
                self.stop_event.wait(self.restart_after)

    def _load_position(self) -> dict[str, Any] | None:
        """The position last persisted, or None (none yet, unreadable, or not a JSON object)."""
        try:
            data = json.loads(self.position_path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _store_position(self, position: dict[str, Any]) -> bool:
        """Persist the position when every incident is on disk; whether it was written."""
        if not self.durable():
            return False
        with contextlib.suppress(OSError):
            write_atomic(self.position_path, json.dumps(position))
            return True
        return False

    def _hand_on(self, pid: int, lines: list[Any], **extra: object) -> None:
        """One complete report to the incidents; an incident that cannot be written must not stop the watcher."""
        try:
            self.on_kill(pid, lines, **extra)
        except Exception:
            log.exception("writing the incident for pid %d failed", pid)
        self.kills_handled += 1
