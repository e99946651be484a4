"""Incidents from a kernel log file (where /dev/kmsg cannot be read): real kernel reports captured
on this machine (tests/fixtures/captured/), written as syslog lines into a kern.log that the real
agent follows; what was there before the first start is skipped, a restart neither repeats nor
loses a kill, a rotated file is read from its start."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.conftest import FIXTURES

CAPTURED = FIXTURES / "captured"


def _syslog(name: str) -> str:
    """A captured report as kern.log has it: "<date> <host> kernel: [  772.46] text"."""
    lines = (CAPTURED / name / "dmesg.txt").read_text().splitlines()
    return "".join(f"Nov 30 02:40:00 gpu-node-7 kernel: {line}\n" for line in lines)


def _victims(state: Path, want: int, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    found: list[int] = []
    while time.monotonic() < deadline:
        d = state / "incidents"
        found = sorted(json.loads(p.read_text())["victim"]["pid"] for p in d.glob("*.json")) if d.is_dir() else []
        if len(found) >= want:
            break
        time.sleep(0.05)
    return found


def _agent(log: Path, state: Path) -> AgentProcess:
    agent = AgentProcess(
        "--listen", "127.0.0.1:0", "--interval", "0.3", "--state-dir", str(state), "--kernel-log", str(log)
    )
    wait_ticks(agent)
    return agent


def test_incidents_from_a_followed_kernel_log(tmp_path: Path):
    log = tmp_path / "kern.log"
    state = tmp_path / "state"
    log.write_text(_syslog("memcg_torchrun_rank"))  # before the agent: the past, not an incident
    agent = _agent(log, state)
    try:
        with log.open("a") as f:
            f.write("Nov 30 02:40:00 gpu-node-7 systemd[1]: Started something.\n")
            f.write(_syslog("memcg_dataloader_worker"))
        assert _victims(state, 1) == [12665]
        doc = json.loads(next((state / "incidents").glob("*.json")).read_text())
        assert doc["diagnosis"]["verdict"] == "cgroup_oom"
        assert doc["victim"]["role"] == "dataloader_worker" and doc["victim"]["comm"] == "pt_data_worker"
        agent.proc.send_signal(signal.SIGTERM)
    finally:
        assert agent.stop() == 0
    with log.open("a") as f:  # while the agent is down
        f.write(_syslog("memcg_python_hog"))
    agent = _agent(log, state)
    try:
        assert _victims(state, 2) == [12591, 12665]
        # rotation: kern.log moved aside, a new one started
        log.rename(tmp_path / "kern.log.1")
        log.write_text(_syslog("memcg_torchrun_rank"))
        assert _victims(state, 3) == [12591, 12665, 12922]
        time.sleep(1.0)
        assert _victims(state, 4, timeout=0.5) == [12591, 12665, 12922]  # nothing twice
    finally:
        assert agent.stop() == 0
