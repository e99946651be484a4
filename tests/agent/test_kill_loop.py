"""The kill -9 loop: kills come one after another and the agent is killed with SIGKILL at a random
moment 0-300 ms after each, then started again. Every kill gets exactly one incident, from each kernel
log source: /dev/kmsg and the journal (real cgroup v1 OOM kills of a Python process that allocates
until killed), and a kernel log file (a syslog daemon's lines, written here: the report captured from
a real cgroup OOM kill, tests/fixtures/captured/memcg_dataloader_worker, with a new pid and time for
each kill). OOMWATCH_KILL_LOOP sets how many kills per source (default 20)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from oomwatch.agent.watch.spans import kill_reports
from oomwatch.procfs.kmsg import parse_kmsg_record
from tests.agent.agentproc import AgentProcess
from tests.agent.test_journalwatch import journald
from tests.cgroup_util import enter, memory_cgroup
from tests.conftest import FIXTURES, require_root_cgroup

KILLS = int(os.environ.get("OOMWATCH_KILL_LOOP", "20"))
HOG = "a = []\nwhile True:\n    a.append(bytearray(1 << 20))\n"
CAPTURE = FIXTURES / "captured" / "memcg_dataloader_worker" / "kmsg.txt"


def _real_kill() -> int:
    """A real cgroup OOM kill; returns the victim's pid."""
    with memory_cgroup(48 << 20, name="oomwatch-killloop") as cg:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOG],
            preexec_fn=lambda: enter(cg),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert proc.wait(timeout=60) == -signal.SIGKILL
    return proc.pid


class _SyslogFile:
    """A kernel log file as a syslog daemon writes it: each kill, the captured report again."""

    def __init__(self, path: Path) -> None:
        records = [r for r in (parse_kmsg_record(x) for x in CAPTURE.read_bytes().splitlines()) if r is not None]
        ((self.pid, report),) = kill_reports(records)
        self.lines = [r.dmesg_line() for r in report]
        self.path = path
        self.count = 0
        path.write_text("")

    def kill(self) -> int:
        self.count += 1
        pid = 3_000_000 + self.count  # no such process: the file is all the agent knows of it

        def moved(line: str) -> str:
            m = re.match(r"\[\s*(\d+)\.(\d+)\]", line)
            assert m
            t = f"[{int(m.group(1)) + 10 * self.count:5d}.{m.group(2)}]"
            return t + re.sub(rf"\b{self.pid}\b", str(pid), line[m.end() :])

        with self.path.open("a") as f:
            f.write("".join(f"Dec  1 12:00:00 node kernel: {moved(line)}\n" for line in self.lines))
        return pid


def _incident_pids(state: Path) -> list[int]:
    d = state / "incidents"
    return [json.loads(p.read_text())["victim"]["pid"] for p in sorted(d.glob("*.json"))] if d.is_dir() else []


@pytest.mark.parametrize("source", ["kmsg", "journal", "file"])
def test_every_kill_once_with_the_agent_killed_at_random_moments(tmp_path: Path, source: str):
    require_root_cgroup()
    state = tmp_path / "state"
    args = ["--listen", "127.0.0.1:0", "--interval", "0.5", "--state-dir", str(state)]
    syslog = None
    if source == "journal":
        args += ["--kernel-log", "journal"]
    elif source == "file":
        syslog = _SyslogFile(tmp_path / "kern.log")
        args += ["--kernel-log", str(syslog.path)]
    rng = random.Random(12)
    victims: list[int] = []
    logs: list[str] = []  # every agent's log
    with journald() if source == "journal" else contextlib.nullcontext():
        agent = AgentProcess(*args)
        try:
            for _ in range(KILLS):
                victims.append(syslog.kill() if syslog is not None else _real_kill())
                time.sleep(rng.uniform(0.0, 0.3))
                agent.proc.send_signal(signal.SIGKILL)
                agent.proc.wait(timeout=10)
                agent.stop()
                logs.extend(agent.lines)
                agent = AgentProcess(*args)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not set(victims) <= set(_incident_pids(state)):
                time.sleep(0.2)
            time.sleep(1.0)  # anything written twice would show by now
        finally:
            rc = agent.stop()
    counts = Counter(p for p in _incident_pids(state) if p in set(victims))
    lost = [p for p in victims if counts[p] == 0]
    twice = {p: n for p, n in counts.items() if n > 1}
    print(f"{source}: {len(victims)} kills, {len(victims) - len(lost)} written, {len(lost)} lost, {len(twice)} twice")
    said = [line for line in logs + agent.lines if "WARNING" in line or "ERROR" in line]
    assert not lost and not twice, (f"lost {lost}, twice {twice}, found {sorted(counts)}", "".join(said[-40:]))
    assert rc == 0
