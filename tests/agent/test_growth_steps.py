"""A rank that keeps memory every step, its steps slowed near the limit (the kernel reclaiming for each
new page): over time its rise "held" like a load, against the steps its output showed it is a climb. The
agent's history keeps the step counter beside the samples, so `diagnose --history` (and the agent's
incidents, through the same analyzers) read the growth against the steps."""

from __future__ import annotations

import json
import time
from pathlib import Path

from oomwatch.agent.analyze.job import analyze, step_points
from oomwatch.agent.history.store import HistoryStore
from oomwatch.agent.tick import ProcessSample, StepMark, Tick
from tests.conftest import run_oomwatch

MIB = 1 << 20
PID, JOB = 4242, "slow-steps-1"


def _steps_at(t: float) -> float:
    """40 steps/s for 4 s, then 5 steps/s."""
    return 40 * t if t <= 4 else 160 + 5 * (t - 4)


def _sample(t: float) -> ProcessSample:
    uss = int((300 + 2 * _steps_at(t)) * MIB)  # 2 MiB kept every step
    return ProcessSample(
        pid=PID, ppid=1, comm="python", role="rank", job=JOB, rank=0, local_rank=0, state="R",
        rss=uss + 60 * MIB, anon=uss, file=60 * MIB, shmem=0, swap=0, hwm=uss + 60 * MIB, pss=uss, uss=uss,
    )  # fmt: skip


def _kernel(limit_kb: int) -> str:
    return "\n".join(
        [
            "[ 20.0] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
            f"[ 20.0] memory: usage {limit_kb}kB, limit {limit_kb}kB, failcnt 0",
            "[ 20.1] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/job,"
            f"task_memcg=/job,task=python,pid={PID},uid=0",
            f"[ 20.1] Memory cgroup out of memory: Killed process {PID} (python) total-vm:2142084kB, "
            f"anon-rss:{limit_kb - 60000}kB, file-rss:60000kB, shmem-rss:0kB, UID:0 pgtables:1428kB oom_score_adj:0",
        ]
    )


def _history(tmp_path: Path, with_steps: bool) -> Path:
    now = time.time() - 30
    db = tmp_path / ("steps" if with_steps else "plain") / "history.db"
    db.parent.mkdir()
    with HistoryStore(db) as store:
        for i in range(21):
            t = i * 0.5
            marks = (StepMark(now + t, JOB, "step_word", "", None, int(_steps_at(t))),) if with_steps and i else ()
            store.record(Tick(time=now + t, duration=0.01, processes=(_sample(t),), steps=marks))
    return db


def test_diagnose_history_reads_the_growth_against_the_steps(tmp_path: Path) -> None:
    kernel = tmp_path / "kernel.log"
    kernel.write_text(_kernel(720 * 1024) + "\n")
    said = {}
    for with_steps in (False, True):
        db = _history(tmp_path, with_steps)
        done = run_oomwatch("diagnose", "-f", "json", str(kernel), "--history", str(db))
        doc = json.loads(done.stdout)
        assert doc["victims"][0]["pid"] == PID and doc["verdict"] == "cgroup_oom", doc["victims"]
        said[with_steps] = doc
    plain, stepped = said[False], said[True]
    # over time: 80% of the rise in the first 38%, then it "held": a load, not an accumulation
    assert not (plain["cause_determined"] and plain["causes"][0]["id"] == "unbounded_cache"), plain["causes"]
    top = stepped["causes"][0]
    assert top["id"] == "unbounded_cache" and stepped["cause_determined"], stepped["causes"]
    line = next(e["text"] for e in top["evidence"] if e["file"] == "agent history")
    assert ": step; against the job's training steps a climb (steps 20 → 190" in line, line


def test_the_analyzers_carry_the_step_counter_rows_as_the_jobs_progress() -> None:
    rows = [
        {"time": 10.0, "rule": "progress_bar", "name": "Epoch 0", "total": 100, "step": 90},
        {"time": 11.0, "rule": "progress_bar", "name": "Epoch 0", "total": 100, "step": 10},  # the next epoch
        {"time": 11.5, "rule": "progress_bar", "name": "Epoch 0", "total": 100, "step": 30},
    ]
    assert step_points(rows) == ((10.0, 90), (11.0, 110), (11.5, 130))
    assert analyze([], None, steps=rows).progress == ((10.0, 90), (11.0, 110), (11.5, 130))
    assert analyze([], None).progress == ()
