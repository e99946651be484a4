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
from oomwatch.agent.steps import FIRST_SECONDS, POLL, READ_MAX, WAITING_POLL, InThread, StepWatch
from oomwatch.agent.tick import StepMark
from oomwatch.engine.rules.loader import load_rules
from oomwatch.estimate.model import WARM_STEPS
from tests.agent.agentproc import AgentProcess, wait_ticks
from tests.agent.loops import FAST_LOOP, RISING_LOOP
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


def _under_agent(tmp_path: Path, code: str, args: list[str], job_id: str, interval: float) -> None:
    """``code`` run as a rank of job ``job_id`` (its launcher's environment), its output to a log, while an agent
    samples every ``interval`` into ``tmp_path / "state"``."""
    script, log = tmp_path / "train.py", tmp_path / "train.log"
    script.write_text(code)
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", TORCHELASTIC_RUN_ID=job_id)
    agent = AgentProcess("--listen", "127.0.0.1:0", "--interval", str(interval), "--state-dir", str(tmp_path / "state"))
    try:
        wait_ticks(agent)
        with open(log, "wb") as out:
            done = subprocess.run([sys.executable, str(script), *args], stdout=out, env=env, timeout=120)
        assert done.returncode == 0
        time.sleep(max(0.5, 1.5 * interval))  # the agent's last ticks of it
    finally:
        agent.stop()


def test_the_agent_keeps_a_jobs_steps_and_estimate_times_the_full_run_by_them(tmp_path: Path) -> None:
    state, job_id = tmp_path / "state", f"oomwatch-steps-{os.getpid()}"
    _under_agent(tmp_path, STEPPING, ["50"], job_id, interval=0.2)
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


def _read(marks: list[StepMark]) -> list[tuple[float, int]]:
    return [(m.time, m.step) for m in marks]


def test_a_jobs_first_steps_are_read_between_ticks_until_its_counter_has_risen_past_them(
    log: tuple[BinaryIO, OutputFile],
) -> None:
    f, out = log
    watch = StepWatch(lambda: RULES)
    assert watch.read(1.0, {"j": [out]}) == [] and watch.first_steps()  # located, no counter yet: read between ticks
    assert watch.poll_every() == WAITING_POLL
    f.write(b"loading the data\n")
    assert watch.poll(1.1) == [] and watch.wanted == 0
    f.write(b"step 0 loss 2.0\n")
    assert _read(watch.poll(1.2)) == [(1.2, 0)] and watch.wanted == 1  # dated by the read between the ticks
    assert watch.poll_every() == POLL
    f.write(b"step 0 loss 2.0\n")  # another rank's: no sample more
    assert _read(watch.poll(1.3)) == [(1.3, 0)] and watch.wanted == 1
    f.write(b"step 1 loss 1.9\nstep 2 loss 1.9\n")  # two steps in one read: one sample
    assert _read(watch.poll(1.4)) == [(1.4, 2)] and watch.wanted == 2
    for n in range(3, WARM_STEPS + 1):
        f.write(f"step {n} loss 1.8\n".encode())
        assert _read(watch.poll(1.5 + n / 100)) == [(1.5 + n / 100, n)]
    assert watch.wanted == WARM_STEPS and watch.first_steps()
    f.write(f"step {WARM_STEPS + 1} loss 1.7\n".encode())  # past its first steps: read at the ticks only
    assert _read(watch.poll(2.0)) == [(2.0, WARM_STEPS + 1)] and watch.wanted == WARM_STEPS
    assert not watch.first_steps() and watch.poll_every() is None
    f.write(f"step {WARM_STEPS + 2} loss 1.7\n".encode())
    assert watch.poll(2.1) == []
    assert _read(watch.read(3.0, {"j": [out]})) == [(3.0, WARM_STEPS + 2)]


def test_a_job_that_prints_no_counter_is_read_between_ticks_for_a_while_only(
    log: tuple[BinaryIO, OutputFile],
) -> None:
    f, out = log
    now = [100.0]
    watch = StepWatch(lambda: RULES, clock=lambda: now[0])
    watch.read(1.0, {"serve": [out]})
    now[0] += FIRST_SECONDS - 1
    assert watch.first_steps()
    now[0] += 2
    f.write(b"step 0 loss 1.0\n")
    assert not watch.first_steps() and watch.poll(2.0) == [] and watch.wanted == 0
    assert _read(watch.read(3.0, {"serve": [out]})) == [(3.0, 0)] and watch.wanted == 0  # at the ticks, as ever
    assert watch.read(4.0, {}) == [] and not watch.first_steps()  # no longer located: forgotten


def test_the_thread_reads_a_jobs_first_steps_between_ticks_and_says_when(log: tuple[BinaryIO, OutputFile]) -> None:
    f, out = log
    woken: list[float] = []
    each = threading.Event()

    def on_step() -> None:
        woken.append(time.monotonic())
        each.set()

    steps = InThread(StepWatch(lambda: RULES), on_step=on_step)
    steps.offer(1.0, {"j": [out]})  # a tick: the job's file located, first seen
    deadline = time.monotonic() + 5
    while not steps.watch.first_steps() and time.monotonic() < deadline:
        time.sleep(0.01)
    got: list[StepMark] = []
    for n in range(3):
        each.clear()
        written = time.monotonic()
        f.write(f"step {n} loss 1.0\n".encode())
        assert each.wait(5), n  # no tick meanwhile: the thread read it on its own
        assert woken[-1] - written < 1.0
    got += steps.offer(9e9, {"j": [out]})
    assert [m.step for m in got] == [0, 1, 2] and all(m.time < 9e9 for m in got), got  # dated when they were read
    assert len(woken) == 3


def _on_a_grid(ticks: list[float], every: float, late: float = 0.15) -> bool:
    """Whether, among ``ticks``, the scheduled ones came every ``every`` seconds at one phase from the first to the
    last (each at most ``late`` after its time), whatever ticks came between them."""
    whole = int((ticks[-1] - ticks[0]) / every)
    for anchor in ticks:
        grid = [anchor + k * every for k in range(-whole - 1, whole + 2)]
        grid = [g for g in grid if ticks[0] - late <= g <= ticks[-1]]
        if len(grid) >= whole and all(any(0 <= t - g <= late for t in ticks) for g in grid):
            return True
    return False


def test_the_agent_samples_a_fast_jobs_first_steps_and_estimate_reads_its_level_once_warm(tmp_path: Path) -> None:
    from oomwatch.agent.history.reader import open_readonly
    from oomwatch.estimate.inputs import from_history
    from oomwatch.estimate.model import build
    from oomwatch.estimate.steps import clock

    state, levels_file, job_id = tmp_path / "state", tmp_path / "levels.json", f"oomwatch-first-steps-{os.getpid()}"
    # the loop waits 3 s before its first step (the agent finds it and its log first), and 3 s after its last
    _under_agent(tmp_path, FAST_LOOP, [str(levels_file), "3", "3"], job_id, interval=1.0)
    store = open_readonly(state / "history.db")
    try:
        rows, step_rows = store.processes(job=job_id), store.steps(job=job_id)
    finally:
        store.close()
    ticks = sorted({float(r.time) for r in rows})
    said = [(round(float(r.time) - ticks[0], 3), r.step) for r in step_rows]
    # its files are read every WAITING_POLL before the first step line (then every POLL): a step or two may pass
    assert step_rows and step_rows[0].step <= 2, said
    first_line, first = float(step_rows[0].time), step_rows[0].step  # when the agent read its first step line
    early = [t for t in ticks if first_line <= t <= first_line + 0.35]
    # samples at its first steps: at a tick a second, one at most in those 0.35 s
    assert len(early) >= 3, (len(early), [round(t - first_line, 3) for t in ticks], said)
    # the ticks kept their schedule meanwhile, to the job's end (other jobs on the node may bring ticks of their
    # own too): the loop steps for 1.8 s and then waits 3 s
    assert _on_a_grid(ticks, 1.0) and ticks[-1] - first_line >= 3.5, [round(t - ticks[0], 3) for t in ticks]
    recorded = from_history(rows, (), "history", step_rows)
    model = build(recorded.traces, recorded.job, clock(recorded.progress, recorded.started))
    rank = next(r for r in model.roles.values() if r.peak > 64 << 20)
    levels = json.loads(levels_file.read_text())
    assert rank.warm is not None
    assert rank.warm == pytest.approx(levels[first], abs=6 << 20), (rank.warm >> 20, levels[first] >> 20)


def test_the_agent_reads_how_far_a_jobs_first_steps_rise_between_its_ticks(tmp_path: Path) -> None:
    """Over a job's first steps the agent reads its processes' memory every 20 ms (agent.peaks), as `oomwatch run`
    does: the history keeps the highest beside each tick, and estimate --job reads how far a step rose above where
    it ended (what a bounded cache's fix adds to the level once warm). Past them, nothing is read between ticks."""
    from oomwatch.agent.history.reader import open_readonly
    from oomwatch.estimate.inputs import from_history
    from oomwatch.estimate.model import build
    from oomwatch.estimate.steps import clock

    state, job_id = tmp_path / "state", f"oomwatch-rising-{os.getpid()}"
    _under_agent(tmp_path, RISING_LOOP, ["3", "3"], job_id, interval=1.0)
    store = open_readonly(state / "history.db")
    try:
        rows, step_rows = store.processes(job=job_id), store.steps(job=job_id)
    finally:
        store.close()
    assert step_rows, "no step read"
    rank = [r for r in rows if r.role == "rank"]
    rose = [(r.anon_peak - r.anon) >> 20 for r in rank if r.anon_peak is not None and r.anon is not None]
    assert rose and max(rose) >= 40, rose  # a step's 48 MiB, read between ticks
    last_step = max(float(r.time) for r in step_rows)
    late = [r for r in rank if float(r.time) > last_step + 1.5]  # its 3 s after its steps: not read between ticks
    assert late and all(r.anon_peak is None for r in late), [(r.time - last_step, r.anon_peak) for r in late]
    recorded = from_history(rows, (), "history", step_rows)
    model = build(recorded.traces, recorded.job, clock(recorded.progress, recorded.started))
    role = model.roles["rank"]
    assert role.step_rise is not None and 40 << 20 <= role.step_rise <= 52 << 20, role.step_rise
