"""Time to OOM: the least-squares forecast on exact series, and end to end a real steady leak in a
cgroup v1 limit, warned before the kernel kills it (the lead time is printed: pytest -s)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from oomwatch.agent.analyze.forecast import Forecast, Warner, predict
from oomwatch.engine.fit import fit
from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.cgroup_util import memory_cgroup
from tests.conftest import require_root_cgroup, run_oomwatch

MIB = 1 << 20


def test_fit_and_predict_on_a_straight_line():
    pts = [(float(t), 100 * MIB + 10 * MIB * t) for t in range(20)]
    slope, intercept, r2 = fit(pts)
    assert slope == pytest.approx(10 * MIB) and intercept == pytest.approx(100 * MIB) and r2 == pytest.approx(1.0)
    seconds, s, _ = predict(pts, 400 * MIB)
    assert s == pytest.approx(10 * MIB)
    assert seconds == pytest.approx(11.0)  # at t=19: 290 MiB; 110 MiB to go at 10 MiB/s


def test_no_forecast_when_flat_shrinking_noisy_or_too_short():
    flat = [(float(t), 100 * MIB) for t in range(20)]
    shrinking = [(float(t), 100 * MIB - MIB * t) for t in range(20)]
    noisy = [(float(t), 100 * MIB + (50 * MIB if t % 2 else 0) + MIB * t / 10) for t in range(20)]
    short = [(t / 10, 100 * MIB + MIB * t) for t in range(20)]  # 1.9 s of data
    for pts in (flat, shrinking, noisy, short, []):
        assert predict(pts, 400 * MIB) is None


def test_warner_says_once_per_episode():
    w = Warner(before=60)

    def f(seconds):
        return Forecast("/a", ("j",), 1, 2, 1.0, seconds, 1.0)

    assert len(w.due([f(30)])) == 1
    assert w.due([f(20)]) == []  # same episode
    assert w.due([f(500)]) == []  # far off: the episode ended
    assert len(w.due([f(10)])) == 1  # a new one


LEAK = """
import os, sys, time
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
print("started", flush=True)
hog = []
while True:
    hog.append(bytearray(4 << 20))  # 4 MiB every 0.2 s: a steady 20 MiB/s leak
    time.sleep(0.2)
"""


def test_forecast_warns_before_the_kill(tmp_path: Path):
    require_root_cgroup()
    script = tmp_path / "leak.py"
    script.write_text(LEAK)
    job = f"leak-{os.getpid()}"
    state = tmp_path / "state"
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.5", "--state-dir", str(state))
    try:
        wait_ticks(agent)
        env = dict(os.environ, RANK="0", LOCAL_RANK="0", TORCHELASTIC_RUN_ID=job)
        with memory_cgroup(400 << 20, name="oomwatch-leak") as cg:
            leak = subprocess.Popen([sys.executable, str(script), str(cg)], stdout=subprocess.DEVNULL, env=env)
            started = time.monotonic()
            try:
                line = agent.wait_for(rf"predicted OOM: cgroup .*\(job {job}\)", timeout=60).string
                warned = time.monotonic()
                assert leak.wait(timeout=60) == -9  # the kernel's SIGKILL
                killed = time.monotonic()
                incidents = _wait_incident(state, leak.pid)
            finally:
                if leak.poll() is None:
                    leak.kill()
                    leak.wait()
    finally:
        agent.stop()
    assert "reaches its limit 400.0 MiB" in line, line
    predicted = float(re.search(r"in (\d+)s at ", line).group(1))
    lead = killed - warned
    print(f"forecast lead time: warned {lead:.1f}s before the kill (predicted {predicted:.0f}s; "
          f"the leak ran {killed - started:.1f}s)")  # fmt: skip
    assert lead >= 3.0
    assert abs(predicted - lead) < max(5.0, lead / 2)  # the forecast was about right

    # `oomwatch diagnose --history`: from the kernel's lines alone the victim is the lone "python" of
    # its cgroup, the job's training process of no known rank; the history knows it was rank 0 of the
    # job and that it grew steadily
    doc = json.loads(incidents[0].read_text())
    kernel = tmp_path / "kernel.log"
    kernel.write_text("\n".join(doc["kernel_lines"]) + "\n")
    plain = json.loads(run_oomwatch("diagnose", "-f", "json", str(kernel)).stdout)
    assert (plain["victims"][0]["role"], plain["victims"][0]["rank"]) == ("rank", None)
    done = run_oomwatch("diagnose", "-f", "json", str(kernel), "--history", str(state / "history.db"))
    merged = json.loads(done.stdout)
    assert done.returncode == 3, done.stderr
    v = merged["victims"][0]
    assert (v["role"], v["rank"]) == ("rank", 0), v
    assert any(f"was rank 0 of job {job}" in n for n in merged["notes"]), merged["notes"]
    top = merged["causes"][0]
    assert top["id"] == "unbounded_cache", merged["causes"]
    grew = [e["text"] for e in top["evidence"] if e["file"] == "agent history"]
    # on its USS when smaps was read 3 times or more in the window, else on its anonymous memory
    assert any("USS (private memory)" in t or "anonymous memory" in t for t in grew), top


def _wait_incident(state: Path, pid: int, timeout: float = 10.0) -> list[Path]:
    """The incidents of the leak's process (the agent reports every kill on the machine, other tests' too)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [
            p for p in sorted((state / "incidents").glob("*.json")) if json.loads(p.read_text())["victim"]["pid"] == pid
        ]
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("no incident for the leak")
