"""The issue's "done when": `oomwatch agent` on a node running a real torchrun job shows each rank and
each DataLoader worker with the right role, rank and job, with USS and PSS, in /metrics."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.agent.agentproc import AgentProcess, wait_metric
from tests.conftest import skip_or_fail

JOB = Path(__file__).with_name("ddp_job.py")


def _torchrun() -> str:
    try:
        import torch  # noqa: F401
    except ImportError:
        skip_or_fail("needs torch (pip install torch==2.13.0)", ".ci/run installs torch==2.13.0")
    found = shutil.which("torchrun")
    if found is None:
        pytest.fail("torch is installed but torchrun is not on PATH")
    return found


def _wait_ready(out: Path, ranks: int, proc: subprocess.Popen, timeout: float = 90.0) -> dict[int, list[int]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = sorted(out.glob("rank*.ready"))
        if len(files) == ranks:
            return {int(f.stem[4:]): [int(x) for x in f.read_text().split()] for f in files}
        if proc.poll() is not None:
            raise AssertionError(f"torchrun exited with {proc.returncode}")
        time.sleep(0.2)
    raise AssertionError("the DDP job did not get its workers running in time")


def test_agent_sees_a_real_torchrun_job(tmp_path: Path):
    torchrun = _torchrun()
    run_id = f"oomwatch-ddp-{os.getpid()}"
    log = (tmp_path / "torchrun.log").open("wb")
    job = subprocess.Popen(
        [torchrun, "--nproc_per_node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
         "--rdzv-id", run_id, str(JOB), str(tmp_path)],
        stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )  # fmt: skip
    agent = None
    try:
        ready = _wait_ready(tmp_path, 2, job)
        agent = AgentProcess(
            "--listen", "127.0.0.1:0", "--interval", "0.5", "--pss-budget", "0.5", "--top-workers", "2"
        )
        expect = {}
        for rank, (rank_pid, *workers) in ready.items():
            expect[rank_pid] = ("rank", rank)
            expect.update({w: ("dataloader_worker", rank) for w in workers})
        assert len(expect) == 6
        last = max(expect)
        text = wait_metric(agent, rf'^oomwatch_process_pss_bytes\{{.*pid="{last}".*\}} ', timeout=30)
        for name in ("oomwatch_process_uss_bytes", "oomwatch_process_pss_bytes"):
            series = {}
            for line in text.splitlines():
                m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
                if m:
                    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
                    series[int(labels["pid"])] = (labels, float(m.group(2)))
            for pid, (role, rank) in expect.items():
                labels, value = series[pid]
                assert labels["role"] == role, (pid, labels)
                assert labels["rank"] == str(rank) and labels["local_rank"] == str(rank), labels
                assert labels["training_job"] == run_id, labels
                assert value > 0
        # the launcher (torchrun's elastic agent) is in the same job
        launcher = re.search(
            rf'^oomwatch_process_resident_bytes\{{.*role="launcher".*training_job="{run_id}"', text, re.M
        )
        assert launcher, "no launcher series for the job"
    finally:
        (tmp_path / "stop").touch()
        if agent is not None:
            assert agent.stop() == 0
        try:
            job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
        log.close()
    assert job.returncode == 0, (tmp_path / "torchrun.log").read_text()[-3000:]
