"""The agent answers for itself: ``/-/healthy`` says 503 when its sampling loop stops ticking, and
SIGTERM ends it within 2 s while it is writing an incident from a job whose output is hostile (hex
runs that made a pattern backtrack for minutes, floods of one anchor word)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from oomwatch.agent.daemon import Agent
from oomwatch.agent.watch.spans import kill_reports
from oomwatch.procfs.kmsg import parse_kmsg_record
from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.conftest import FIXTURES, ROOT, require_root_cgroup

CAPTURE = FIXTURES / "captured" / "memcg_dataloader_worker" / "kmsg.txt"


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_healthy_turns_unhealthy_when_the_sampling_loop_stops_ticking(tmp_path: Path):
    agent = Agent(None, {"listen": "127.0.0.1:0", "state_dir": tmp_path / "state", "interval": 1.0})
    agent.server.start()
    try:
        url = f"http://127.0.0.1:{agent.server.address[1]}/-/healthy"
        assert _get(url) == (200, b"OK\n")
        agent._ticked = time.monotonic() - 30  # the loop stuck for 30 s
        status, body = _get(url)
        assert status == 503 and re.match(rb"unhealthy: no tick for 3\ds \(every 1s expected\)", body), body
        agent._ticked = time.monotonic()
        assert _get(url)[0] == 200
    finally:
        agent.server.stop()


def _report_for(pid: int) -> str:
    """The captured report, its victim replaced by ``pid``, as a syslog daemon writes it."""
    records = [r for r in (parse_kmsg_record(x) for x in CAPTURE.read_bytes().splitlines()) if r is not None]
    ((old, report),) = kill_reports(records)
    victim = re.compile(rf"\b{old}\b")
    return "".join(f"Dec  1 12:00:00 node kernel: {victim.sub(str(pid), r.dmesg_line())}\n" for r in report)


def test_sigterm_within_2s_while_an_incident_reads_hostile_job_output(tmp_path: Path):
    require_root_cgroup()
    output = tmp_path / "train.log"
    hostile = ["0" * 3000 + "g", "deadbeef " * 4000 + "x", "Killed process " * 20000, "\x1b]0;x\x07" * 5000]
    output.write_text("\n".join(hostile * 40) + "\n")
    kern = tmp_path / "kern.log"
    kern.write_text("")
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", TORCHELASTIC_RUN_ID="hostile-job",
               PYTHONPATH=str(ROOT))  # fmt: skip
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(tmp_path / "state"),
                         "--kernel-log", str(kern))  # fmt: skip
    with output.open("a") as out:
        job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdout=out, stderr=out, env=env)
    try:
        wait_ticks(agent, n=5)
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=10)
        with kern.open("a") as f:
            f.write(_report_for(job.pid))
        # while the incident is made (the watcher's settle time, then the diagnosis): the ticks go on
        late = 0.0
        until = time.monotonic() + 0.8
        while time.monotonic() < until:
            m = re.search(r"^oomwatch_last_tick_timestamp_seconds (\S+)", agent.scrape(), re.M)
            assert m
            late = max(late, time.time() - float(m.group(1)))
            time.sleep(0.05)
        assert late < 0.2 + 1.0, late  # one interval, and a second for a loaded machine
        asked = time.monotonic()
        agent.proc.send_signal(signal.SIGTERM)
        agent.proc.wait(timeout=10)
        took = time.monotonic() - asked
        assert took < 2.0, took
        print(f"stopped {took:.2f}s after SIGTERM; the last tick at most {late:.2f}s old meanwhile")
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        agent.stop()
