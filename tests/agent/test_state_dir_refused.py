"""A state directory that refuses writes loses no kill: on a full tmpfs and on a read-only one, a real
cgroup v1 OOM kill is counted and exported at once (the alert's series is there), the failed writes
are counted, and the incident is written once the disk allows: when space is freed (the agent tries
again), and after a restart once the directory is writable again (the kernel log is read again from
the position saved before the kill)."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from tests.agent.agentproc import AgentProcess, wait_metric, wait_ticks
from tests.agent.test_kill_loop import _real_kill
from tests.conftest import require_root_cgroup, skip_or_fail


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(directory: Path) -> Path:
    """Fill the filesystem of ``directory`` to the last byte."""
    filler = directory / "filler"
    with contextlib.suppress(OSError), filler.open("wb") as f:
        while True:
            f.write(b"\0" * (64 << 10))
            f.flush()
    return filler


def _incidents_of(state: Path, pid: int) -> list[dict]:
    d = state / "incidents"
    docs = [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.is_dir() else []
    return [doc for doc in docs if doc["victim"]["pid"] == pid]


def _wait_incident(state: Path, pid: int, timeout: float) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not _incidents_of(state, pid):
        time.sleep(0.2)
    time.sleep(0.5)
    return _incidents_of(state, pid)


def _counted(agent: AgentProcess, pid: int) -> str:
    """The exposition once the kill of ``pid`` is counted, not written."""
    return wait_metric(agent, r"^oomwatch_incident_write_errors_total [1-9]", timeout=15)


def test_a_full_state_dir_counts_the_kill_at_once_and_writes_it_when_space_is_freed(tmp_path: Path):
    require_root_cgroup()
    with _tmpfs(tmp_path / "state", "4m") as state:
        agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(state))
        try:
            wait_ticks(agent)
            filler = _fill(state)
            pid = _real_kill()
            text = _counted(agent, pid)
            assert re.search(r'^oomwatch_incident_timestamp_seconds\{.*verdict="cgroup_oom"', text, re.M), text
            assert re.search(r"^oomwatch_incidents_unwritten 1\.0", text, re.M)
            assert not _incidents_of(state, pid)
            filler.unlink()
            found = _wait_incident(state, pid, timeout=15)
            assert len(found) == 1, found
            assert found[0]["diagnosis"]["verdict"] == "cgroup_oom"
            assert re.search(r"^oomwatch_incidents_unwritten 0\.0", agent.scrape(), re.M)
        finally:
            assert agent.stop() == 0
    assert any("cannot write the incident" in line for line in agent.lines), agent.lines


def test_a_read_only_incidents_dir_loses_no_kill_across_a_restart(tmp_path: Path):
    require_root_cgroup()
    state = tmp_path / "state"
    args = ("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(state))
    # the incidents' own filesystem (the history keeps writing beside it: a busy one cannot be remounted)
    with _tmpfs(state / "incidents", "16m") as incidents:
        agent = AgentProcess(*args)
        try:
            wait_ticks(agent)
            time.sleep(0.5)  # its kernel log position is saved
            subprocess.run(["mount", "-o", "remount,ro", str(incidents)], check=True)
            pid = _real_kill()
            _counted(agent, pid)
            time.sleep(0.5)
            agent.proc.send_signal(signal.SIGKILL)
            agent.proc.wait(timeout=10)
        finally:
            agent.stop()
        assert not _incidents_of(state, pid)
        subprocess.run(["mount", "-o", "remount,rw", str(incidents)], check=True)
        agent = AgentProcess(*args)
        try:
            found = _wait_incident(state, pid, timeout=15)
            assert len(found) == 1, found
        finally:
            assert agent.stop() == 0
