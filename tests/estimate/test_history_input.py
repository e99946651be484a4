"""`oomwatch estimate --job` reads the agent's history (written by the real store) and models the job."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from oomwatch.agent.history.store import HistoryStore
from oomwatch.agent.tick import CgroupSample, ProcessSample, StepMark, Tick
from tests.conftest import ROOT, run_oomwatch
from tests.estimate.schema import valid

MIB = 1 << 20


def _proc(pid: int, role: str, rank: int | None, job: str, uss: int) -> ProcessSample:
    return ProcessSample(pid=pid, ppid=1, comm="python", role=role, job=job, rank=rank, local_rank=rank, state="S",
                         rss=uss + 40 * MIB, anon=uss, file=40 * MIB, shmem=0, swap=0, hwm=None, pss=uss + 10 * MIB,
                         uss=uss, smaps_time=None, cgroup="/job-a")  # fmt: skip


def test_a_job_in_the_agents_history_is_estimated_at_more_ranks(tmp_path: Path):
    now = time.time() - 60
    with HistoryStore(tmp_path / "history.db") as store:
        for i in range(30):
            loaded = 600 * MIB if i >= 5 else 100 * MIB
            procs = [_proc(10 + r, "rank", r, "run-7", loaded) for r in range(2)]
            procs.append(_proc(99, "rank", 0, "other-job", 5000 * MIB))  # another job on the node
            usage = 2 * loaded + 300 * MIB
            cg = CgroupSample(path="/job-a", version=1, usage=usage, limit=None, effective_limit=None, peak=None,
                              anon=2 * loaded + 20 * MIB, file=280 * MIB, shmem=0, swap=0, oom_kills=0, pressure=None,
                              jobs=("run-7",))  # fmt: skip
            store.record(Tick(time=now + i, duration=0.01, processes=tuple(procs), cgroups=(cg,)))
    done = run_oomwatch("estimate", "--job", "run-7", "--state-dir", str(tmp_path), "--ranks", "4",
                        "--fix", "keep_in_memory_duplication", "--format", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    doc = valid(json.loads(done.stdout))
    assert doc["measured"]["ranks"] == 2 and doc["measured"]["basis"] == "cgroup"
    ranks = next(r for r in doc["projection"]["by_role"] if r["role"] == "rank")
    assert ranks["count"] == 4 and ranks["each_bytes"] == 600 * MIB
    assert doc["projection"]["needed_bytes"] == 4 * 600 * MIB + 20 * MIB
    fixed = doc["what_if"][0]
    assert fixed["cause"] == "keep_in_memory_duplication"
    assert fixed["projection"]["needed_bytes"] == 4 * 100 * MIB + 20 * MIB
    # what the mechanism holds of the estimate: what its fix takes off it
    assert fixed["holds_bytes"] == 4 * 500 * MIB and fixed["share"] == round(2000 / 2420, 4)
    text = run_oomwatch("estimate", "--job", "run-7", "--state-dir", str(tmp_path), "--ranks", "4",
                        "--fix", "keep_in_memory_duplication").stdout.decode()  # fmt: skip
    assert "By mechanism (what each fix would take off the estimate" in text
    assert re.search(r"keep_in_memory_duplication\s+2\.0 GiB\s+83%", text), text

    done = run_oomwatch("estimate", "--job", "nope", "--state-dir", str(tmp_path))
    assert done.returncode == 2 and "no samples of this job" in done.stderr.decode()


def test_the_answer_as_text_and_markdown_says_the_same_figures(tmp_path: Path):
    now = time.time() - 60
    with HistoryStore(tmp_path / "history.db") as store:
        for i in range(30):
            procs = [_proc(10 + r, "rank", r, "run-8", 300 * MIB) for r in range(2)]
            store.record(Tick(time=now + i, duration=0.01, processes=tuple(procs)))
    args = ("estimate", "--job", "run-8", "--state-dir", str(tmp_path), "--ranks", "8", "--nodes", "2", "--limit", "2G")
    text = run_oomwatch(*args).stdout.decode()
    markdown = run_oomwatch(*args, "--format", "markdown").stdout.decode()
    # 4 ranks a node of 300 MiB each and the PSS beyond USS of the 2 measured (10 MiB each), once
    assert "HOST MEMORY ESTIMATE for 8 ranks on 2 nodes (4 ranks a node), per node" in text
    assert "Needs 1.2 GiB" in text and "fits" in text and "no memory cgroup of its own" in text
    assert (
        "### Host memory estimate: 8 ranks on 2 nodes" in markdown and "| ranks | 4 | 300.0 MiB | 1.2 GiB |" in markdown
    )


def test_the_step_counter_the_agent_read_from_the_jobs_output_times_its_steps(tmp_path: Path):
    # a rank that keeps 4 MiB of every step, 2 steps a second; the agent read "step N loss" lines as they came
    now = time.time() - 60
    with HistoryStore(tmp_path / "history.db") as store:
        for i in range(30):
            procs = (_proc(10, "rank", 0, "run-9", 200 * MIB + 8 * i * MIB), _proc(20, "rank", 0, "run-10", 300 * MIB))
            marks = (StepMark(now + i, "run-9", "step_word", "", None, 2 * i),)
            store.record(Tick(time=now + i, duration=0.01, processes=procs, steps=marks))
    done = run_oomwatch("estimate", "--job", "run-9", "--state-dir", str(tmp_path), "--steps", "200",
                        "--limit", "1G", "--format", "json")  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    doc = valid(json.loads(done.stdout))
    assert doc["measured"]["steps"]["rule"] == "step_word" and doc["measured"]["steps"]["last"] == 58
    projection = doc["projection"]
    assert projection["steps"] == 200
    # 4 MiB a step from 200 MiB at step 0: the limit (1 GiB) at about step 206: past the run's 200, so none
    rank = next(r for r in projection["by_role"] if r["role"] == "rank")
    assert abs(rank["each_bytes"] - (200 + 4 * 200) * MIB) <= 0.05 * rank["each_bytes"], rank["each_bytes"] / MIB
    # a job without a counter in the history (run-10 printed none): --steps says what to give instead
    done = run_oomwatch("estimate", "--job", "run-10", "--state-dir", str(tmp_path), "--steps", "200")
    assert done.returncode == 2 and "from its output files" in done.stderr.decode()


def test_a_counter_too_short_to_time_says_so(tmp_path: Path):
    now = time.time() - 60
    with HistoryStore(tmp_path / "history.db") as store:
        for i in range(10):
            marks = (StepMark(now + i, "run-11", "step_word", "", None, i),) if i in (3, 4) else ()
            store.record(Tick(time=now + i, duration=0.01, processes=(_proc(10, "rank", 0, "run-11", 300 * MIB),),
                              steps=marks))  # fmt: skip
    done = run_oomwatch("estimate", "--job", "run-11", "--state-dir", str(tmp_path), "--steps", "100")
    assert done.returncode == 2
    assert "shows its step counter only from step 3 to 4 in 1.0 s, too few" in done.stderr.decode(), done.stderr


def _as_agent_history(report: dict, state: Path, job: str) -> None:
    """A run report's samples written into an agent history by the real store, tick by tick, as the agent
    would have recorded them: each process and the job's cgroup with the figures the report holds (the bytes
    read, the highest read between ticks), and the step counter's readings with the tick that found them."""
    samples = report["samples"]
    ticks: dict[float, tuple[list[ProcessSample], list[CgroupSample]]] = {}
    for p in samples["processes"]:
        for point in p["points"]:
            v = dict(zip(samples["process_columns"], point, strict=True))
            ticks.setdefault(v["time"], ([], []))[0].append(ProcessSample(
                pid=p["pid"], ppid=1, comm=p["comm"], role=p["role"], job=job, rank=p["rank"], local_rank=p["rank"],
                state="S", rss=v["rss"], anon=v["anon"], file=None, shmem=v["shmem"], swap=0, hwm=None, pss=v["pss"],
                uss=v["uss"], rchar=v["rchar"], anon_peak=v["anon_peak"], cgroup="/job"))  # fmt: skip
    for point in samples["cgroup"]["points"]:
        v = dict(zip(samples["cgroup_columns"], point, strict=True))
        ticks.setdefault(v["time"], ([], []))[1].append(CgroupSample(
            path="/job", version=1, usage=v["usage"], limit=v["limit"], effective_limit=v["limit"], peak=None,
            anon=v["anon"], file=v["file"], shmem=v["shmem"], swap=0, oom_kills=0, pressure=None, jobs=(job,),
            unreclaimable_peak=v["unreclaimable_peak"]))  # fmt: skip
    progress = report["progress"]
    marks = [StepMark(t, job, progress["rule"], "", progress["total"], n) for t, n in progress["points"]]
    times = sorted(ticks)
    with HistoryStore(state / "history.db") as store:
        for i, t in enumerate(times):
            until = times[i + 1] if i + 1 < len(times) else float("inf")
            found = tuple(m for m in marks if (i == 0 or m.time >= t) and m.time < until)
            store.record(Tick(time=t, duration=0.01, processes=tuple(ticks[t][0]), cgroups=tuple(ticks[t][1]),
                              steps=found))  # fmt: skip


REAL_RUNS = ROOT / "bench" / "results" / "estimate_accuracy" / "fresh-r9" / "runs" / "rep1"


@pytest.mark.parametrize(("case", "longer"), [
    ("keep_in_memory/broken-ranks2-free", ()),  # its counter: 15 steps in 0.1 s, too few to time a longer run
    ("rank_leak/broken-ranks1-free", ("--steps", "400")),
    ("dict_cache/broken-workers1-free", ("--steps", "400")),
    ("manager_cache/broken-workers2-free", ("--steps", "400")),
])  # fmt: skip
def test_the_same_samples_from_the_agents_history_give_the_same_estimate_as_from_a_run_report(
    tmp_path: Path, case: str, longer: tuple[str, ...]
) -> None:
    """Every path agrees: a real run's samples (oomwatch run --report, bench/results), read from the agent's
    history, give the same projection, fixes and assumptions. Before, the history's bytes read and highest read
    between ticks did not reach the estimate: a per-rank copy's fix measured the copy by its steepest climb, not
    by what the rank read, and a bounded cache's fix left a rank at 255 MiB, not 273."""
    report = REAL_RUNS / case / "report.json"
    _as_agent_history(json.loads(report.read_text()), tmp_path, "real-run")
    scale = ("--ranks", "4", "--workers", "4", "--limit", "1500M", *longer, "--format", "json")
    answers = []
    for source in (("--report", str(report)), ("--job", "real-run", "--state-dir", str(tmp_path))):
        done = run_oomwatch("estimate", *source, *scale)
        assert done.returncode == 0, done.stderr.decode()
        doc = valid(json.loads(done.stdout))
        assert doc["what_if"], "a fix to compare"
        answers.append({k: v for k, v in doc.items() if k != "source"})
    assert answers[0] == answers[1]
