"""What the followers of the kernel's log share (agent/watch/base.py): the restart after an error, the position
file kept only while incidents are durable, the settle time, and a failing incident that stops nothing."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest

from oomwatch.agent.watch import base
from oomwatch.agent.watch.base import KernelLogWatcher, Settle


class _Flaky(KernelLogWatcher):
    position_file = "flaky-position.json"
    restart_after = 0.01

    def __init__(self, state_dir: Path, durable: bool = True) -> None:
        self.kills: list[tuple[int, list[str]]] = []
        super().__init__(state_dir, self._on_kill, lambda: durable)
        self.runs = 0
        self.second_run = threading.Event()

    def _on_kill(self, pid: int, lines: list[str]) -> None:
        if pid < 0:
            raise RuntimeError("disk full")
        self.kills.append((pid, lines))

    def _failed(self) -> str:
        return "the flaky watcher failed"

    def _watch(self) -> None:
        self.runs += 1
        if self.runs == 1:
            raise ValueError("an odd input")
        self.second_run.set()
        self.stop_event.wait()


def test_a_failing_watch_is_logged_and_run_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    w = _Flaky(tmp_path)
    with caplog.at_level(logging.ERROR, logger="oomwatch.agent"):
        w.start()
        assert w.second_run.wait(5)
        w.stop()
    assert not w.thread.is_alive()
    assert w.runs == 2 and w.restarts == 1
    assert [r.getMessage() for r in caplog.records] == ["the flaky watcher failed"]


def test_the_position_is_kept_only_while_durable(tmp_path: Path) -> None:
    w = _Flaky(tmp_path)
    assert w._load_position() is None  # none yet
    assert w._store_position({"seq": 7})
    assert json.loads((tmp_path / "flaky-position.json").read_text()) == {"seq": 7}
    assert w._load_position() == {"seq": 7}
    assert not _Flaky(tmp_path, durable=False)._store_position({"seq": 8})
    assert w._load_position() == {"seq": 7}
    (tmp_path / "flaky-position.json").write_text("[1, 2]")  # not an object: as if none
    assert w._load_position() is None
    (tmp_path / "flaky-position.json").write_text("{")  # half a file: as if none
    assert w._load_position() is None


def test_a_failing_incident_is_counted_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    w = _Flaky(tmp_path)
    with caplog.at_level(logging.ERROR, logger="oomwatch.agent"):
        w._hand_on(-1, ["Killed process 1"])
        w._hand_on(42, ["Killed process 42"])
    assert w.kills == [(42, ["Killed process 42"])] and w.kills_handled == 2
    assert [r.getMessage() for r in caplog.records] == ["writing the incident for pid -1 failed"]


def test_settle_waits_for_quiet_after_a_kill_line(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(base.time, "monotonic", lambda: now[0])
    s = Settle()
    s.saw(["a header, no kill yet"])
    assert not s.pending and not s.due()
    s.saw(["Out of memory: Killed process 42 (python)"])
    assert s.pending and not s.due()
    now[0] += base.SETTLE / 2
    s.saw(["oom_reaper: reaped process 42 (python)"])  # still being written: the wait starts again
    now[0] += base.SETTLE * 0.75
    assert not s.due()
    now[0] += base.SETTLE
    assert s.due()
    s.reset()
    assert not s.pending and not s.due()
