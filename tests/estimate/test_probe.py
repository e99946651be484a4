"""A real probe: `oomwatch estimate --probe` runs a job that enters a memory cgroup of its own, stops it, and
projects it to more workers; the projection is held against a real run at that scale (its cgroup's anonymous +
shmem peak, as the probe of that run measures it)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.cgroup_util import memory_cgroup
from tests.conftest import require_root_cgroup, run_oomwatch
from tests.estimate.schema import valid

MIB = 1 << 20
# long enough for the job to have forked and filled every worker on a loaded 2-core machine (4 s was not, once)
PROBE = "8s"

# a main process holding 150 MiB of its own, and N forked workers (named as torch names them) holding 40 MiB each
JOB = """
import os, sys, time
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
held = bytearray(150 << 20)
for i in range(0, len(held), 4096):
    held[i] = 1
for w in range(int(sys.argv[2])):
    if os.fork() == 0:
        open("/proc/self/comm", "w").write("pt_data_worker")
        mine = bytearray(40 << 20)
        for i in range(0, len(mine), 4096):
            mine[i] = 1
        time.sleep(60)
        os._exit(0)
time.sleep(60)
"""


def _runs(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _probe(tmp_path: Path, workers: int, *extra: str) -> tuple[dict, dict, float]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    saved = tmp_path / f"probe-{workers}.json"
    with memory_cgroup(2048 * MIB, name=f"oomwatch-estimate-{workers}") as cg:
        started = time.monotonic()
        done = run_oomwatch("estimate", "--probe", PROBE, "--save", str(saved), "--format", "json", *extra, "--",
                            sys.executable, str(script), str(cg), str(workers), timeout=120)  # fmt: skip
        took = time.monotonic() - started
    assert done.returncode == 0, done.stderr.decode()
    return valid(json.loads(done.stdout)), json.loads(saved.read_text()), took


def test_a_probe_of_two_workers_predicts_four(tmp_path: Path):
    require_root_cgroup()
    small, report, took = _probe(tmp_path, 2, "--workers", "4", "--limit", "300M")
    assert took < 30  # stopped after its 8 s, not left to sleep its minute
    pids = [p["pid"] for p in report["samples"]["processes"]]
    assert len(pids) == 3 and not [pid for pid in pids if _runs(pid)]
    measured = small["measured"]
    assert measured["basis"] == "cgroup" and measured["workers_per_rank"] == 2
    roles = {r["role"]: r for r in measured["roles"]}
    assert 38 * MIB <= roles["dataloader_worker"]["peak_bytes"] <= 48 * MIB
    projection = small["projection"]
    assert {r["role"]: r["count"] for r in projection["by_role"]} == {"dataloader_worker": 4, "rank": 1}
    # the parent's 150 MiB is shared with its workers after the fork: counted once, not per process
    assert 120 * MIB <= projection["shared_once_bytes"] <= 170 * MIB

    large, _, _ = _probe(tmp_path, 4)
    truth = large["measured"]["needed_bytes"]
    error = abs(projection["needed_bytes"] - truth) / truth
    assert error <= 0.15, (projection["needed_bytes"] / MIB, truth / MIB)
    assert projection["verdict"] == ("over" if truth > 300 * MIB else "fits")


# a training loop that keeps 4 MiB of every step (an accumulation) and logs its step, as training scripts do
STEPPING = """
import os, sys, time
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
kept = []
for step in range(int(sys.argv[2])):
    block = bytearray(4 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    kept.append(block)
    print(f"epoch 0 step {step} loss {1 / (step + 1):.4f}", flush=True)
    time.sleep(0.04)
"""


def test_a_probe_that_printed_its_steps_projects_the_full_runs_steps(tmp_path: Path):
    require_root_cgroup()
    script = tmp_path / "steps.py"
    script.write_text(STEPPING)
    with memory_cgroup(2048 * MIB, name="oomwatch-estimate-steps") as cg:
        done = run_oomwatch("estimate", "--probe", "3s", "--steps", "150", "--limit", "400M", "-f", "json", "--",
                            sys.executable, str(script), str(cg), "1000", timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    probe = valid(json.loads(done.stdout))
    steps = probe["measured"]["steps"]
    assert steps is not None and steps["rule"] == "step_word" and steps["last"] >= 20
    projection = probe["projection"]
    assert projection["steps"] == 150 and any("150 steps" in a for a in projection["assumptions"])
    # the limit is reached where 4 MiB a step fills what the start left of it
    assert projection["step_at_limit"] is not None and projection["seconds_to_limit"] is not None
    with memory_cgroup(2048 * MIB, name="oomwatch-estimate-steps-full") as cg:
        full = run_oomwatch("run", "-q", "--report", str(tmp_path / "full.json"), "--", sys.executable, str(script),
                            str(cg), "150", timeout=120)  # fmt: skip
    assert full.returncode == 0, full.stderr.decode()
    report = json.loads((tmp_path / "full.json").read_text())
    truth = max((p[2] or 0) + (p[3] or 0) for p in report["samples"]["cgroup"]["points"])  # anon + shmem
    assert abs(projection["needed_bytes"] - truth) / truth <= 0.15, (projection["needed_bytes"] / MIB, truth / MIB)
    # the step the full run crossed 400M at, against the one predicted
    crossed = next(n for t, n in report["progress"]["points"] if _anon_at(report, t) >= 400 * MIB)
    assert abs(projection["step_at_limit"] - crossed) <= 0.15 * crossed, (projection["step_at_limit"], crossed)


def _anon_at(report: dict, time: float) -> int:
    points = report["samples"]["cgroup"]["points"]
    p = min(points, key=lambda pt: abs(pt[0] - time))
    return (p[2] or 0) + (p[3] or 0)


def test_refusals_say_what_to_give(tmp_path: Path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"command": ["python"], "processes": []}))
    cases = [
        ([], "give a recorded run"),
        (["--report", str(old)], "has no samples"),
        (["--report", str(old), "--probe", "5s"], "one of them"),
        (["--report", str(tmp_path / "none.json")], "cannot read"),
        (["--probe", "soon", "--", "true"], "not a duration"),
        (["--report", str(old), "--limit", "lots"], "not a size"),
        (["--report", str(old), "--", "python", "x.py"], "only run with --probe"),
        (["--report", str(old), "--steps", "10", "--duration", "1h"], "--duration or --steps"),
    ]
    for args, said in cases:
        done = run_oomwatch("estimate", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr.decode(), (args, done.stderr)
    # a run whose output showed no step counter cannot be asked for in steps
    quiet = tmp_path / "quiet.json"
    points = [[float(i), 100 * MIB, 110 * MIB, 120 * MIB, 100 * MIB, 0] for i in range(10)]
    quiet.write_text(json.dumps({"samples": {"processes": [{"pid": 1, "role": "rank", "points": points}]}}))
    done = run_oomwatch("estimate", "--report", str(quiet), "--steps", "100")
    assert (
        done.returncode == 2
        and "no training step counter" in done.stderr.decode()
        and "--duration" in done.stderr.decode()
    )
