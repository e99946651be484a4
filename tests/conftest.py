"""Shared test helpers. Tests run from a checkout: `python -m pytest`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}, and CI=true: this test must run in CI")
        pytest.skip(reason)
