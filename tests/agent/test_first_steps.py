"""`oomwatch run` samples a job at each of its first training steps (oomwatch/agent/first_steps.py).

The pure tests feed a FirstSteps the lines a training script prints, cut into chunks anywhere, and count the
wakes. The real one runs a Python loop that steps every 30 ms (a tick every second would see one of its first
10 steps at most) under ``run_command`` and checks that ticks came right after its first step lines and that the
estimator then reads its level once warm as it was (the script writes its own anonymous memory down).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from oomwatch.agent import first_steps
from oomwatch.agent.first_steps import FirstSteps
from oomwatch.agent.run import run_command
from oomwatch.engine.rules.loader import load_rules
from oomwatch.estimate.model import WARM_STEPS
from tests.agent.loops import FAST_LOOP

STEPS = load_rules(()).steps


def _watch(rules=lambda: STEPS) -> tuple[FirstSteps, list[int]]:
    """A FirstSteps whose wakes are counted (the event is read and cleared after each feed)."""
    wake = threading.Event()
    first = FirstSteps(rules, wake)
    woken: list[int] = []
    feed = first.feeder()

    def fed(chunk: bytes) -> None:
        feed(chunk, 0.0)
        woken.append(int(wake.is_set()))
        wake.clear()

    first.fed = fed  # type: ignore[attr-defined]
    return first, woken


def test_each_of_the_first_steps_wakes_once_then_none():
    first, woken = _watch()
    for n in range(30):
        first.fed(f"[rank 0] step {n} loss 2.{n:02d} rss=300MiB\n".encode())  # type: ignore[attr-defined]
    assert woken == [1] * (WARM_STEPS + 1) + [0] * (30 - WARM_STEPS - 1)
    assert first.wakes == WARM_STEPS + 1


def test_a_line_cut_across_chunks_wakes_when_it_ends():
    first, woken = _watch()
    for chunk in (b"[rank 0] st", b"ep 0 loss 2.3", b"1\n[rank 0] step 1 loss", b" 2.2\r"):
        first.fed(chunk)  # type: ignore[attr-defined]
    assert woken == [0, 0, 1, 1]


def test_lines_that_are_no_step_counter_wake_nothing():
    first, woken = _watch()
    for line in ("loading model", "Map: 100%|██████████| 2000/2000 [00:03<00:00, 580.12 examples/s]", "step by step"):
        first.fed(f"{line}\n".encode())  # type: ignore[attr-defined]
    assert woken == [0, 0, 0] and first.wakes == 0


def test_the_first_counter_opens_the_window_and_its_rise_closes_it():
    first, woken = _watch()
    bar = "train: {:3d}%|█ | {}/500 [00:01<00:10, 40.1it/s]\r"
    first.fed(bar.format(0, 0).encode())  # type: ignore[attr-defined]
    first.fed(b"iter 3: loss 2.5\n")  # type: ignore[attr-defined]  (another counter's line: nothing)
    first.fed(bar.format(1, 5).encode())  # type: ignore[attr-defined]
    first.fed(bar.format(10, 50).encode())  # type: ignore[attr-defined]  (past its window: closed, and done)
    first.fed(bar.format(0, 1).encode())  # type: ignore[attr-defined]  (the next epoch's bar: nothing)
    assert woken == [1, 0, 1, 0, 0] and first.done


def test_lines_with_a_counters_words_stop_being_read_past_their_most(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(first_steps, "LINES_MAX", 50)
    first, woken = _watch()
    first.fed(b"".join(b"step into the next phase\n" for _ in range(60)))  # type: ignore[attr-defined]
    assert first.done and first.lines == 60
    first.fed(b"step 0 loss 1.0\n")  # type: ignore[attr-defined]
    assert woken == [0, 0] and first.lines == 60  # read no more


def test_once_done_a_chunk_costs_nothing():
    first, _ = _watch()
    for n in range(WARM_STEPS + 2):
        first.fed(f"step {n} loss 1.0\n".encode())  # type: ignore[attr-defined]
    assert first.done
    read = first.lines
    first.fed(b"".join(f"step {n} loss 1.0\n".encode() for n in range(1000)))  # type: ignore[attr-defined]
    assert first.lines == read


def test_a_step_read_again_wakes_nothing_and_nothing_before_the_rules_are_loaded(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(first_steps, "LINES_MAX", 50)
    loaded: list[object] = []
    first, woken = _watch(lambda: STEPS if loaded else None)
    first.fed(b"step 0 loss 1.0\n")  # type: ignore[attr-defined]
    loaded.append(True)
    for _ in range(55):  # a counter that never rises (every rank prints step 0): read until LINES_MAX
        first.fed(b"step 0 loss 1.0\n")  # type: ignore[attr-defined]
    assert woken[0] == 0 and sum(woken) == 1 and first.done
    second, woken = _watch()
    for n in (0, 0, 1, 1, 0, 2, 2, 1):  # two ranks: each step wakes once, at its first line; a late line none
        second.fed(f"step {n} loss 1.0\n".encode())  # type: ignore[attr-defined]
    assert woken == [1, 0, 1, 0, 0, 1, 0, 0] and second.wakes == 3


def test_a_failure_turns_it_off_and_the_output_goes_on():
    def broken() -> None:
        raise RuntimeError("rules gone")

    first, woken = _watch(broken)
    first.fed(b"step 0 loss 1.0\n")  # type: ignore[attr-defined]
    first.fed(b"step 1 loss 1.0\n")  # type: ignore[attr-defined]
    assert woken == [0, 0] and first.done


def test_a_fast_loop_is_sampled_at_its_first_steps(tmp_path: Path):
    levels_file = tmp_path / "levels.json"
    sink = tmp_path / "out.txt"
    with sink.open("wb") as out:
        result = run_command(
            [sys.executable, "-c", FAST_LOOP, str(levels_file), "0.6"],
            interval=1.0,
            stdout=out,
            stderr=out,
            read_code=False,
        )
    assert result.returncode == 0
    assert result.progress is not None and result.progress.points[0][1] == 0
    first_line = result.progress.points[0][0]  # when "step 0" came
    pid = max(result.recorder.trails, key=lambda pid: len(result.recorder.trails[pid].points))
    ticks = [point[0] for point in result.recorder.trails[pid].points]
    early = [t for t in ticks if first_line <= t <= first_line + 0.35]
    # ticks at its first steps (at each, where the output and the ticks keep up: on a loaded 2-core machine
    # some lines come together): at a tick every second, one at most in those 0.35 s
    assert len(early) >= 3, (len(early), ticks)
    assert early[0] - first_line < 0.05

    # the estimator reads the loop's level once its first steps were done as the loop saw it
    from oomwatch.estimate.inputs import from_report
    from oomwatch.estimate.model import build
    from oomwatch.estimate.steps import clock
    from oomwatch.render.run_report import run_report

    doc = json.loads(run_report(result, ["python", "loop.py"]))
    recorded = from_report(doc, "run")
    model = build(recorded.traces, recorded.job, clock(recorded.progress, recorded.started))
    loop = next(r for r in model.roles.values() if r.peak > 64 << 20)
    levels = json.loads(levels_file.read_text())
    assert loop.at_first_step is not None and loop.warm is not None
    # its level without what it kept: at its first step, 64 MiB + the interpreter + 1 MiB
    assert loop.warm == pytest.approx(levels[0], abs=6 << 20), (loop.warm >> 20, levels[0] >> 20)
