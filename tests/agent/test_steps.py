"""The agent's step watch on real files: a job's output file read through this process's own descriptor (as the
agent reads a job's through /proc/PID/fd/N), what it gained each tick read by the real step rules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import pytest

from oomwatch.agent.incidents.joboutput import OutputFile
from oomwatch.agent.steps import READ_MAX, InThread, StepWatch
from oomwatch.agent.tick import StepMark
from oomwatch.engine.rules.loader import load_rules
from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.conftest import run_oomwatch

RULES = load_rules(()).steps
MIB = 1 << 20


@pytest.fixture
def log(tmp_path: Path) -> Iterator[tuple[BinaryIO, OutputFile]]:
    path = tmp_path / "train.log"
    with open(path, "wb", buffering=0) as f:
        st = os.fstat(f.fileno())
        yield f, OutputFile(str(path), os.getpid(), f.fileno(), st.st_dev, st.st_ino)


def _steps(
    watch: StepWatch, now: float, located: dict[str, list[OutputFile]]
) -> list[tuple[str, str, int | None, int]]:
    return [(m.job, m.rule, m.total, m.step) for m in watch.read(now, located) if m.time == now]


def test_what_a_log_gains_each_tick_is_read_from_where_it_was(log: tuple[BinaryIO, OutputFile]) -> None:
    f, out = log
    watch = StepWatch(lambda: RULES)
    f.write(b"step 5 loss 2.0\n")  # before the agent saw the file: not dated now
    assert _steps(watch, 1.0, {"job-a": [out]}) == []
    f.write(b"loading...\nstep 10 loss 1.9\nstep 20 loss 1.8\n")
    assert _steps(watch, 2.0, {"job-a": [out]}) == [("job-a", "step_word", None, 20)]  # the latest of the tick
    assert _steps(watch, 3.0, {"job-a": [out]}) == []  # nothing new
    f.write(b"step 30 lo")  # a line not ended yet waits for its end
    assert _steps(watch, 4.0, {"job-a": [out]}) == []
    f.write(b"ss 1.7\nstep 1")
    assert _steps(watch, 5.0, {"job-a": [out]}) == [("job-a", "step_word", None, 30)]
    f.write(b"234 loss 1.6\n")  # "step 1" was not read as a step of its own
    assert _steps(watch, 6.0, {"job-a": [out]}) == [("job-a", "step_word", None, 1234)]


def test_a_progress_bar_redrawn_with_carriage_returns(log: tuple[BinaryIO, OutputFile]) -> None:
    f, out = log
    watch = StepWatch(lambda: RULES)
    watch.read(0.0, {"j": [out]})
    f.write(" 10%|█         | 10/100 [00:01<00:09, 9.9it/s]\r 20%|██        | 20/100 [00:02<00:08, 9.9it/s]\r".encode())
    # the bar's latest state; a validation bar in the same tick is no training counter
    f.write("Validation DataLoader 0:  40%|████      | 4/10 [00:00<00:00, 12.3it/s]\r".encode())
    assert _steps(watch, 1.0, {"j": [out]}) == [("j", "progress_bar", 100, 20)]


def test_a_rewritten_log_is_read_from_its_start_and_a_flood_from_its_end(log: tuple[BinaryIO, OutputFile]) -> None:
    f, out = log
    watch = StepWatch(lambda: RULES)
    f.write(b"x" * 100 + b"\n")
    watch.read(0.0, {"j": [out]})
    f.truncate(0)
    os.lseek(f.fileno(), 0, os.SEEK_SET)
    f.write(b"step 3 loss 1\n")
    assert _steps(watch, 1.0, {"j": [out]}) == [("j", "step_word", None, 3)]
    # more than a tick reads: its end, from the first whole line there
    f.write(b"step 4 loss 1\n" + b"noise " * (READ_MAX // 6 + 100) + b"\nstep 99 loss 0.5\n")
    assert _steps(watch, 2.0, {"j": [out]}) == [("j", "step_word", None, 99)]


def test_nothing_is_read_before_the_rules_are_loaded_and_a_forgotten_job_starts_again(
    log: tuple[BinaryIO, OutputFile],
) -> None:
    f, out = log
    loaded: list[object] = []
    watch = StepWatch(lambda: RULES if loaded else None)
    f.write(b"step 1 loss 1\n")
    assert watch.read(0.0, {"j": [out]}) == []
    loaded.append(True)
    assert watch.read(1.0, {"j": [out]}) == []  # first seen now: from its end on
    f.write(b"step 2 loss 1\n")
    # one file behind two descriptors (stdout and stderr) of two processes is read once
    twice = OutputFile(out.path, out.pid, out.fd, out.dev, out.ino)
    assert _steps(watch, 2.0, {"j": [out, twice]}) == [("j", "step_word", None, 2)]
    assert watch.read(3.0, {}) == []  # the job is no longer located
    f.write(b"step 3 loss 1\n")
    assert watch.read(4.0, {"j": [out]}) == []  # seen again: from its end on
    # a file replaced under the same descriptor number is not the one located
    other = OutputFile(out.path, out.pid, out.fd, out.dev, out.ino + 1)
    assert watch.read(5.0, {"k": [other]}) == []


class _Hanging(StepWatch):
    """A watch whose reads wait for ``go`` (a log on a file system that stopped answering)."""

    def __init__(self) -> None:
        super().__init__(lambda: RULES)
        self.go = threading.Event()
        self.asked: list[float] = []

    def read(self, now: float, located: Mapping[str, Sequence[OutputFile]]) -> list[StepMark]:
        self.asked.append(now)
        self.go.wait(10)
        return [StepMark(now, "j", "step_word", "", None, int(now))]


def test_a_read_that_hangs_holds_its_own_thread_not_the_ticks() -> None:
    hanging = _Hanging()
    steps = InThread(hanging)
    assert steps.offer(1.0, {}) == []
    deadline = time.monotonic() + 5
    while not hanging.asked and time.monotonic() < deadline:
        time.sleep(0.01)
    assert hanging.asked == [1.0]  # its thread is in the read that hangs
    started = time.monotonic()
    for t in range(2, 6):  # four more ticks meanwhile: each offer returns at once, with nothing
        assert steps.offer(float(t), {}) == []
    assert time.monotonic() - started < 1.0
    hanging.go.set()
    got: list[StepMark] = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(m.time == 9.0 for m in got):
        got += steps.offer(9.0, {})
        time.sleep(0.05)
    # the hung read's marks first; the ticks offered while it hung were replaced by the newest (none is queued up)
    assert got[0].time == 1.0 and not {2.0, 3.0, 4.0} & set(hanging.asked), (got, hanging.asked)


# a rank (its launcher's environment) keeping 4 MiB of every step, printing its step to a file as it goes
STEPPING = """
import sys, time
kept = []
for step in range(int(sys.argv[1])):
    block = bytearray(4 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    kept.append(block)
    print(f"step {step} loss {1 / (step + 1):.4f}", flush=True)
    time.sleep(0.1)
"""


def test_the_agent_keeps_a_jobs_steps_and_estimate_times_the_full_run_by_them(tmp_path: Path) -> None:
    script, log, state = tmp_path / "train.py", tmp_path / "train.log", tmp_path / "state"
    script.write_text(STEPPING)
    job_id = f"oomwatch-steps-{os.getpid()}"
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", TORCHELASTIC_RUN_ID=job_id)
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", "0.2", "--state-dir", str(state))
    try:
        wait_ticks(agent)
        with open(log, "wb") as out:
            done = subprocess.run([sys.executable, str(script), "50"], stdout=out, env=env, timeout=120)
        assert done.returncode == 0
        time.sleep(0.5)  # the agent's last ticks of it
    finally:
        agent.stop()
    estimated = run_oomwatch("estimate", "--job", job_id, "--state-dir", str(state), "--steps", "400",
                             "--format", "json")  # fmt: skip
    assert estimated.returncode == 0, estimated.stderr.decode()
    doc = json.loads(estimated.stdout)
    steps = doc["measured"]["steps"]
    # the agent found the job's lines as they came (first seen from the file's end: the first ones may be gone)
    assert steps["rule"] == "step_word" and 40 <= steps["last"] <= 49, steps
    assert doc["projection"]["steps"] == 400
    rank = next(r for r in doc["projection"]["by_role"] if r["role"] == "rank")
    measured = next(r for r in doc["measured"]["roles"] if r["role"] == "rank")
    # what it held after its 50 steps, and 4 MiB for each of the 350 more
    expected = measured["peak_bytes"] + 350 * 4 * MIB
    assert abs(rank["each_bytes"] - expected) <= 0.15 * expected, (rank["each_bytes"] / MIB, expected / MIB)
    print("steps", steps, rank["each_bytes"] / MIB, expected / MIB)
