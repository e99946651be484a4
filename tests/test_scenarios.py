"""Real reproductions (``scenarios/``): each host-memory mechanism, run for real with torch on
CPU inside a cgroup v1 memory limit, must get a process OOM-killed by the kernel, and its
fixed variant must survive the same limit. The broken capture (launcher/training output plus
the kernel's own report) must then be diagnosed by ``oomwatch diagnose`` as a cgroup OOM with
the right victim.

The live runs need root and a writable v1 memory controller (skip elsewhere, fail under
CI=true) and torch + datasets (skip without them, except under CI=true, where CI installs
them); the 14 runs take about two to three minutes on 2 cores; prepared data is cached in
``~/.cache/oomwatch-scenarios`` (or ``$OOMWATCH_SCENARIO_CACHE``). The committed captures in
tests/fixtures/scenarios/ and the runner's pure helpers are checked without either.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scenarios.catalog import SCENARIOS, Scenario
from scenarios.cgroup import parse_kmsg_record, parse_size
from scenarios.kernel import extract_reports
from scenarios.runner import path_rewrites, scrub
from tests.conftest import FIXTURES, ROOT, require_root_cgroup, require_scenario_deps, run_oomwatch

CAPTURES = FIXTURES / "scenarios"

# The role oomwatch should give the first process the kernel killed, by the role the runner's
# /proc sampler saw it in. From logs alone a multiprocessing manager and a single-process
# script's main process are both just `python` to the kernel: "unknown" is the honest answer
# there (the live sampler of the agent can tell them apart); it must never be a worker or rank.
OOMWATCH_ROLE = {
    "rank": {"rank"},
    "dataloader_worker": {"dataloader_worker"},
    "manager": {"manager", "unknown"},
    "main": {"rank", "unknown"},
}


def _run(name: str, fixed: bool, out: Path) -> dict[str, Any]:
    require_root_cgroup()
    require_scenario_deps()
    from scenarios.runner import run_scenario

    meta = run_scenario(SCENARIOS[name], fixed=fixed, out=out)
    for f in ("console.txt", "kmsg.txt", "dmesg.txt", "meta.json", "HOW.md"):
        assert (out / f).exists(), f
    assert json.loads((out / "meta.json").read_text()) == json.loads(json.dumps(meta))
    return meta


def _role(hint: str | None) -> str:
    return "rank" if hint and hint.startswith("rank ") else str(hint)


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_broken_variant_is_oom_killed_and_diagnosed(name: str, tmp_path: Path) -> None:
    scn: Scenario = SCENARIOS[name]
    meta = _run(name, False, tmp_path)
    console = (tmp_path / "console.txt").read_bytes()
    kmsg = (tmp_path / "kmsg.txt").read_text()
    summary = f"{name}: {meta['duration_s']} s, exit {meta['exit_code']}/{meta['exit_signal']}, {meta['oom_kills']}"

    # the kernel killed a process of this run: its report for our cgroup is in kmsg.txt
    assert meta["killed_by_kernel"], summary
    assert not meta["timed_out"], summary
    assert meta["memory_oom_control_oom_kill"] >= 1, summary
    assert meta["memory_max_usage_in_bytes"] >= meta["limit_bytes"] * 0.95, summary
    first = meta["oom_kills"][0]
    assert f"Killed process {first['killed_pid']} (" in kmsg
    assert "invoked oom-killer" in kmsg and meta["cgroup_path"] in kmsg
    assert kmsg.count("oom-kill:") == len(meta["oom_kills"])
    # ... and the one it picked is the one the mechanism predicts (the largest RSS)
    assert _role(first["role_hint"]) == scn.victim_role, summary
    # the workload printed its configuration before it died
    assert b"config: {" in console

    r = run_oomwatch("diagnose", "-f", "json", "console.txt", "kmsg.txt", cwd=tmp_path)
    assert r.returncode == 3, r.stderr.decode()
    diag = json.loads(r.stdout)
    assert diag["verdict"] == "cgroup_oom", diag["summary"]
    assert diag["confirmed"] is True
    victims = {v["pid"]: v for v in diag["victims"]}
    killed = [k["killed_pid"] for k in meta["oom_kills"]]
    assert set(killed) <= set(victims), (killed, list(victims))
    victim = victims[first["killed_pid"]]
    assert victim["anon_rss_bytes"] == first["anon_rss_kb"] * 1024
    assert victim["cgroup"] == meta["cgroup_path"]
    assert victim["role"] in OOMWATCH_ROLE[scn.victim_role], (victim, summary)
    assert diag["causes"][0]["id"] == scn.cause, [(c["id"], c["confidence"]) for c in diag["causes"]]


@pytest.mark.slow
@pytest.mark.root
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fixed_variant_survives_the_same_limit(name: str, tmp_path: Path) -> None:
    meta = _run(name, True, tmp_path)
    summary = f"{name} --fixed: {meta['duration_s']} s, exit {meta['exit_code']}/{meta['exit_signal']}"
    assert meta["exit_code"] == 0, summary + "\n" + (tmp_path / "console.txt").read_text(errors="replace")[-3000:]
    assert not meta["killed_by_kernel"] and not meta["oom_kills"], summary
    assert meta["memory_oom_control_oom_kill"] == 0, summary
    assert (tmp_path / "kmsg.txt").read_bytes() == b""
    assert meta["memory_max_usage_in_bytes"] <= meta["limit_bytes"]


# ----------------------------------------------------------------- committed captures, no root needed


def _records(path: Path) -> list:
    return [r for line in path.read_bytes().splitlines() if (r := parse_kmsg_record(line))]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_committed_captures_are_complete_and_consistent(name: str) -> None:
    for variant, fixed in ((name, False), (name + "-fixed", True)):
        folder = CAPTURES / variant
        for f in ("console.txt", "kmsg.txt", "dmesg.txt", "meta.json", "HOW.md"):
            assert (folder / f).is_file(), folder / f
        meta = json.loads((folder / "meta.json").read_text())
        assert (meta["name"], meta["fixed"], meta["limit"]) == (name, fixed, SCENARIOS[name].limit)
        for f in ("console.txt", "meta.json", "HOW.md"):  # no path of the capturing machine
            text = (folder / f).read_text(errors="replace")
            assert str(ROOT) + "/" not in text and "/root/" not in text and ".pyenv" not in text, folder / f
        records = _records(folder / "kmsg.txt")
        dmesg = (folder / "dmesg.txt").read_text().splitlines()
        assert dmesg == [r.dmesg_line() for r in records]
        reports = extract_reports(records, meta["cgroup_path"])
        assert [r.killed_pid for r in reports] == [k["killed_pid"] for k in meta["oom_kills"]]
        if fixed:
            assert meta["exit_code"] == 0 and not records and not meta["killed_by_kernel"]
        else:
            assert reports and meta["killed_by_kernel"]
            first = meta["oom_kills"][0]["role_hint"]
            assert ("rank" if first.startswith("rank ") else first) == SCENARIOS[name].victim_role


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_committed_broken_capture_is_a_cgroup_oom(name: str) -> None:
    folder = CAPTURES / name
    meta = json.loads((folder / "meta.json").read_text())
    r = run_oomwatch("diagnose", "-f", "json", "console.txt", "kmsg.txt", cwd=folder)
    assert r.returncode == 3, r.stderr.decode()
    diag = json.loads(r.stdout)
    assert diag["verdict"] == "cgroup_oom" and diag["confirmed"] is True
    first = meta["oom_kills"][0]
    victims = {v["pid"]: v for v in diag["victims"]}
    assert first["killed_pid"] in victims
    role = "rank" if first["role_hint"].startswith("rank ") else first["role_hint"]
    got = victims[first["killed_pid"]]["role"]
    assert got in OOMWATCH_ROLE[role]
    top = diag["causes"][0]
    assert top["id"] == SCENARIOS[name].cause, [(c["id"], c["confidence"]) for c in diag["causes"]]
    assert top["confidence"] >= 0.5 and top["evidence"] and top["fix"] and top["confirm"]


def test_extract_reports_keeps_only_our_cgroup() -> None:
    """Another cgroup's reports in the same ring buffer are left out, and ours are kept whole."""
    records = _records(CAPTURES / "keep_in_memory" / "kmsg.txt")
    meta = json.loads((CAPTURES / "keep_in_memory" / "meta.json").read_text())
    mine = meta["cgroup_path"]
    foreign = [parse_kmsg_record(r.raw.replace(mine.encode(), b"/other/container")) for r in records]
    mixed = [*[f for f in foreign if f], *records]
    ours = extract_reports(mixed, mine)
    assert [r.killed_pid for r in ours] == [k["killed_pid"] for k in meta["oom_kills"]]
    kept = [rec for rep in ours for rec in rep.records]
    assert {id(r) for r in kept} == {id(r) for r in records}  # every record of ours, none of theirs
    assert len(extract_reports(mixed, "/other/container")) == len(ours)
    assert extract_reports(records, mine.rsplit("/", 1)[0])  # a parent's path covers its children
    assert extract_reports(records, mine + "-not") == []


def test_parse_size_and_scrub() -> None:
    assert parse_size("1500M") == 1500 << 20
    assert parse_size("2G") == 2 << 30
    assert parse_size("512k") == 512 << 10
    assert parse_size("12345") == 12345
    rewrites = path_rewrites()
    text = f'File "{ROOT}/scenarios/workloads/x.py", line 1\n'.encode()
    assert scrub(text, rewrites) == b'File "/home/user/oomwatch/scenarios/workloads/x.py", line 1\n'
