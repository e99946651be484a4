"""Shared test helpers. Tests run from a checkout: `python -m pytest`."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/cases/*/expected.json from the current output (review the diff!)",
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def run_oomwatch(*args: str, stdin: bytes | None = None, timeout: float = 120, cwd: Path | None = None):
    """Run the real command line in a subprocess (real exit codes, real stderr)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "oomwatch", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env=env,
        cwd=cwd or ROOT,
    )


def require_root_cgroup() -> None:
    """Skip where there is no writable cgroup v1 memory controller; fail in CI (CI=true)."""
    from tests.cgroup_util import v1_memory_parent

    reason = None
    if os.geteuid() != 0:
        reason = "needs root"
    elif v1_memory_parent() is None:
        reason = "needs a writable cgroup v1 memory controller"
    if reason:
        skip_or_fail(reason)


def skip_or_fail(reason: str, in_ci: str = "this test must run in CI") -> NoReturn:
    """Skip for ``reason``; under CI=true (.ci/run installs everything) fail instead."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}, and CI=true: {in_ci}")
    pytest.skip(reason)


def require_tool(name: str, install: str) -> str:
    """The path of command ``name``; skipped where it is missing (``install`` says how to get it), failed in CI."""
    path = shutil.which(name)
    if path is None:
        skip_or_fail(f"{name} not found ({install})", ".ci/run installs it")
    return path


def terminate(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """Stop a process this test started, by its pid: SIGTERM, then SIGKILL after ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


SCENARIO_DEPS = ("torch", "datasets", "transformers", "lightning", "accelerate", "pandas", "pyarrow", "psutil")


def require_scenario_deps() -> None:
    """What the scenario workloads run on: torch and datasets; the variants also transformers,
    Lightning and accelerate."""
    missing = [m for m in SCENARIO_DEPS if importlib.util.find_spec(m) is None]
    if missing:
        skip_or_fail(f"scenarios need {', '.join(missing)} (see .ci/run for the versions)", ".ci/run installs them")
