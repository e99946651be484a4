"""The wheel carries the rules, schema and example: install it into a fresh virtual
environment and run `oomwatch diagnose` from another directory."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_wheel_installs_and_diagnoses_from_elsewhere(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)],
        capture_output=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stderr.decode()[-2000:]
    wheel = next(dist.glob("oomwatch-*.whl"))
    env_dir = tmp_path / "venv"
    # the dependencies come from this interpreter's site-packages; oomwatch itself from the wheel
    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(env_dir)
    py = env_dir / "bin" / "python"
    inst = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall", str(wheel)],
        capture_output=True,
        timeout=300,
    )
    assert inst.returncode == 0, inst.stderr.decode()[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run(
        [str(py), "-c", "import oomwatch, pathlib; print(pathlib.Path(oomwatch.__file__).resolve())"],
        capture_output=True,
        cwd=elsewhere,
    )
    assert str(env_dir.resolve()) in where.stdout.decode(), where.stdout.decode()
    log = elsewhere / "dmesg.txt"
    log.write_bytes((ROOT / "tests/fixtures/kernel/k-006.log").read_bytes())
    run = subprocess.run(
        [str(env_dir / "bin" / "oomwatch"), "diagnose", "--format", "json", "dmesg.txt"],
        capture_output=True,
        cwd=elsewhere,
        timeout=120,
    )
    assert run.returncode == 3, run.stderr.decode()
    out = json.loads(run.stdout)
    assert out["verdict"] == "host_oom" and out["victims"][0]["pid"] == 473206
    lint = subprocess.run([str(env_dir / "bin" / "oomwatch"), "rules", "lint"], capture_output=True, cwd=elsewhere)
    assert lint.returncode == 0, lint.stderr.decode()
    schema = subprocess.run(
        [
            str(py),
            "-c",
            "import importlib.resources as r; print(r.files('oomwatch.data').joinpath('diagnosis.schema.json').is_file())",
        ],
        capture_output=True,
        cwd=elsewhere,
    )
    assert schema.stdout.strip() == b"True"
    # every module of the source tree is in the wheel (a new subpackage missing from pyproject's list would
    # install an agent that cannot import its own parts)
    import zipfile

    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".py")}
    source = {p.relative_to(ROOT).as_posix() for p in (ROOT / "oomwatch").rglob("*.py")}
    assert source <= shipped, sorted(source - shipped)
