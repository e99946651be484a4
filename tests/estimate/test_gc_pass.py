"""The copy-on-write fix's constants against real forked DataLoader workers (bench/worker_gc_pass.py): a worker over
numpy storage un-shares about WORKER_FLOOR of its parent before its garbage collector makes a full pass, and about
GC_PASS more with one; without its collector it holds less than either, and gc.freeze() in the parent
before the workers start keeps a full pass off the parent's objects."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from oomwatch.estimate.fixes import GC_PASS, WORKER_FLOOR
from tests.conftest import ROOT, skip_or_fail


@pytest.mark.slow
def test_a_full_collection_in_a_forked_worker_unshares_about_what_the_model_says():
    if importlib.util.find_spec("torch") is None:
        skip_or_fail("needs torch (see .ci/run for the version)", ".ci/run installs it")
    if not Path("/proc/self/smaps_rollup").exists():
        skip_or_fail("needs /proc/PID/smaps_rollup (Linux 4.14 or later)")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "worker_gc_pass.py"), "--workers", "2", "--json"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    r = json.loads(done.stdout)
    modes = {m: v["worker_uss_median"] for m, v in r["modes"].items()}
    # the floor and the pass within a factor of two of the constants (the interpreter's objects depend on the
    # versions of torch and numpy installed, not on this job)
    assert WORKER_FLOOR / 2 <= r["floor"] <= WORKER_FLOOR * 2, modes
    assert GC_PASS / 2 <= r["gc_pass"] <= GC_PASS * 2, modes
    # the collector is what un-shares them: off, a worker holds less than as it is
    assert modes["off"] < modes["as is"] < modes["collect"], modes
    # and gc.freeze() in the parent before the workers start (the fix's advice) keeps a full pass off its objects
    assert modes["frozen"] < modes["as is"] + GC_PASS / 4, modes
