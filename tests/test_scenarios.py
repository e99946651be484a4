"""The committed captures of the seed reproductions (tests/fixtures/scenarios/, made by
``scenarios/``: each host-memory mechanism run for real with torch on CPU inside a cgroup v1
memory limit) and the runner's pure helpers, checked without root: each capture is whole and
consistent, and its console plus kernel report is diagnosed as a cgroup OOM with the right victim
and cause. The live runs of every scenario, diagnosed three ways, are in tests/test_three_ways.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scenarios.catalog import GENERAL, SCENARIOS
from scenarios.cgroup import parse_kmsg_record, parse_size
from scenarios.kernel import extract_reports
from scenarios.runner import path_rewrites, scrub
from tests.conftest import FIXTURES, ROOT, run_oomwatch

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
    """Its console and kernel report with the command that ran (the script is read for its calls):
    the scenario's cause, determined; from the logs alone, that cause, its general form, or none
    determined — never another."""
    folder = CAPTURES / name
    meta = json.loads((folder / "meta.json").read_text())
    logs = (str(folder / "console.txt"), str(folder / "kmsg.txt"))
    r = run_oomwatch("diagnose", "-f", "json", *logs, "--command", meta["command"], cwd=ROOT)
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
    assert diag["cause_determined"] and top["evidence"] and top["fix"] and top["confirm"]

    alone = json.loads(run_oomwatch("diagnose", "-f", "json", *logs, "--no-code", cwd=ROOT).stdout)
    if alone["cause_determined"]:
        assert alone["causes"][0]["id"] in {SCENARIOS[name].cause, *GENERAL.get(SCENARIOS[name].cause, ())}


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


def test_a_scenario_scales_by_the_flags_its_script_declares():
    from scenarios.variants import VARIANTS

    seed = SCENARIOS["cow_refcount"].scaled(workers=2)
    assert seed.broken_args[-2:] == ("--num-workers", "2") and seed.fixed_args[-2:] == ("--num-workers", "2")
    variant = VARIANTS["textcls_jsonl_workers"].scaled(workers=1)  # its script says --workers
    assert variant.broken_args[-2:] == ("--workers", "1") and variant.workers_flag() == "--workers"
    ranks = SCENARIOS["keep_in_memory"].scaled(nproc=3)
    assert ranks.nproc == 3 and "--nproc-per-node" in ranks.argv(False, Path("/data"))
    with pytest.raises(ValueError, match="takes no --num-workers"):
        SCENARIOS["keep_in_memory"].scaled(workers=2)
    with pytest.raises(ValueError, match="not launched by torchrun"):
        SCENARIOS["cow_refcount"].scaled(nproc=2)


def test_a_job_another_launcher_starts_scales_through_that_launchers_rank_count():
    from scenarios.variants import VARIANTS

    accelerate = VARIANTS["gru_lm_accelerate_vmrss"]
    assert "--num_processes 2 " in accelerate.command(False, None)  # as it always ran
    one = accelerate.scaled(nproc=1)
    assert "--num_processes 1 " in one.command(False, None) and "--num_processes 1 " in one.command(True, None)
    assert one.fixed_args == accelerate.fixed_args  # the launcher takes the count, not the script
    spawn = VARIANTS["ema_eval_spawn"]
    assert "--world-size" not in spawn.command(False, Path("/d"))  # the script's own default (3)
    two = spawn.scaled(nproc=2)
    assert two.ranks == 2 and two.command(True, Path("/d")).endswith("--v2 --world-size 2")
    assert two.command(False, Path("/d")).endswith("--ckpt /d --world-size 2")
    shell = VARIANTS["ctr_two_ranks"].scaled(nproc=4)
    assert "--nproc_per_node=4 " in shell.command(False, None)
    with pytest.raises(ValueError, match="not launched by torchrun"):
        VARIANTS["linear_probe_job"].scaled(nproc=2)  # a shell line with no rank count in it
