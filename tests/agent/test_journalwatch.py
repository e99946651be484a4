"""The journal as the kernel log source: ``journalctl -o json`` entries parsed exactly, then for real —
a real systemd-journald (the machine's, or one this test starts and stops by its pid) importing the
kernel's messages, the agent following it with ``--kernel-log journal``, a real cgroup v1 OOM kill,
the incident from the journal's lines; the agent killed with -9, a kill while it is down, and the
restart resumes from the saved cursor: the missed kills written, none twice."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from oomwatch.agent.watch.journal import journal_command, journal_readable, parse_entry
from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.agent.test_incidents import _hog_script, _run_hog, _wait_incidents
from tests.conftest import require_root_cgroup, skip_or_fail, terminate

KILL = "Memory cgroup out of memory: Killed process 4242 (pt_data_worker) total-vm:1kB, anon-rss:1kB"


def entry(**fields) -> bytes:
    base = {"__CURSOR": "s=1;i=2", "_SOURCE_MONOTONIC_TIMESTAMP": "19405949923", "MESSAGE": KILL}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None}).encode()


def test_entries_become_dmesg_lines_stamped_with_the_kernels_time():
    e = parse_entry(entry())
    assert e is not None and e.cursor == "s=1;i=2" and e.kernel_time == pytest.approx(19405.949923)
    assert e.text == f"[19405.949923] {KILL}"
    # journald's own receipt time when the kernel's is missing; no time at all: the bare message
    assert parse_entry(entry(_SOURCE_MONOTONIC_TIMESTAMP=None, __MONOTONIC_TIMESTAMP="5000000")).text.startswith(
        "[    5.000000] "
    )
    assert parse_entry(entry(_SOURCE_MONOTONIC_TIMESTAMP=None)).text == KILL
    # a message that is not UTF-8 comes as a list of byte values
    raw = parse_entry(entry(MESSAGE=list(b"oom-kill:task=caf\xe9,pid=7")))
    assert raw is not None and raw.text.endswith("oom-kill:task=caf\ufffd,pid=7")
    two = parse_entry(entry(MESSAGE="first\nsecond"))
    assert two is not None and two.text.split("\n") == ["[19405.949923] first", "[19405.949923] second"]
    for bad in (b"not json", b"[1, 2]", entry(__CURSOR=None), entry(MESSAGE=None), entry(MESSAGE=[1, "x"])):
        assert parse_entry(bad) is None, bad


def test_the_command_resumes_after_the_cursor_or_starts_at_the_end():
    assert journal_command(None)[-2:] == ["--lines", "0"]
    resume = journal_command("s=abc;i=9")
    assert resume[resume.index("--after-cursor") + 1] == "s=abc;i=9" and "--follow" in resume and "--dmesg" in resume


def _journald_running() -> bool:
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() == "systemd-journal":
                return True
    return False


@contextlib.contextmanager
def journald() -> Iterator[None]:
    """The machine's journald, or a real one started here (and stopped by its pid, with the runtime
    directories it created removed)."""
    if _journald_running():
        yield
        return
    exe = next((p for p in ("/lib/systemd/systemd-journald", "/usr/lib/systemd/systemd-journald")
                if os.access(p, os.X_OK)), None)  # fmt: skip
    if exe is None or os.geteuid() != 0:
        skip_or_fail("needs root and systemd-journald (Debian: systemd)")
    made = [p for p in (Path("/run/systemd/journal"), Path("/run/log")) if not p.exists()]
    proc = subprocess.Popen([exe], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while journal_readable() is not None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert journal_readable() is None, f"journald did not start: {journal_readable()}"
        yield
    finally:
        terminate(proc, timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()
        for p in made:
            shutil.rmtree(p, ignore_errors=True)


def test_incidents_from_the_journal_and_a_restart_from_its_cursor(tmp_path: Path):
    require_root_cgroup()
    state = tmp_path / "state"
    script = _hog_script(tmp_path)
    args = ("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(state), "--kernel-log", "journal")
    with journald():
        agent = AgentProcess(*args)
        try:
            wait_ticks(agent)
            done, ended = _run_hog(script, 160 << 20)
            assert done.returncode == 1, done.stderr
            workers = {int(m) for m in re.findall(rb"pid (\d+)\) is killed", done.stderr)}
            found = _wait_incidents(state, workers)
            appeared = time.monotonic()
            assert len(found) == 2, "".join(agent.lines)
            for path in found:
                doc = json.loads(path.read_text())
                assert doc["diagnosis"]["verdict"] == "cgroup_oom" and doc["diagnosis"]["confirmed"] is True
                assert doc["victim"]["role"] == "dataloader_worker"
                assert any("Killed process" in line for line in doc["kernel_lines"])
                assert 0 <= doc["latency_seconds"] < 2.0, doc["latency_seconds"]  # the kernel's clock to written
            print(f"journal: last incident {appeared - ended:.2f} s after the hog ended; latency "
                  f"{[json.loads(p.read_text())['latency_seconds'] for p in found]}")  # fmt: skip
            cursor = json.loads((state / "journal-position.json").read_text())["cursor"]
            assert cursor.startswith("s=")
            agent.proc.send_signal(signal.SIGKILL)
            agent.proc.wait(timeout=10)
            done, _ = _run_hog(script, 160 << 20)  # while the agent is down
            later = {int(m) for m in re.findall(rb"pid (\d+)\) is killed", done.stderr)}
            assert len(later) == 2
        finally:
            agent.stop()
        agent = AgentProcess(*args)
        try:
            found = _wait_incidents(state, workers | later)
            time.sleep(1.0)  # anything written twice would show by now
            pids = [json.loads(p.read_text())["victim"]["pid"] for p in _wait_incidents(state, workers | later)]
            assert sorted(pids) == sorted(workers | later), pids
        finally:
            assert agent.stop() == 0
    assert not any("cannot follow the journal" in line for line in agent.lines), agent.lines
