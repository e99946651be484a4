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
        done = run_oomwatch("estimate", "--probe", "4s", "--save", str(saved), "--format", "json", *extra, "--",
                            sys.executable, str(script), str(cg), str(workers), timeout=120)  # fmt: skip
        took = time.monotonic() - started
    assert done.returncode == 0, done.stderr.decode()
    return valid(json.loads(done.stdout)), json.loads(saved.read_text()), took


def test_a_probe_of_two_workers_predicts_four(tmp_path: Path):
    require_root_cgroup()
    small, report, took = _probe(tmp_path, 2, "--workers", "4", "--limit", "300M")
    assert took < 30  # stopped after 4 s, not left to sleep its minute
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
    ]
    for args, said in cases:
        done = run_oomwatch("estimate", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr.decode(), (args, done.stderr)
