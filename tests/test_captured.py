"""Real captures made here (tests/fixtures/captured/, see its README): every kernel
rendering of each report gives the kernel's victim exactly; the console output alone
gives the right unconfirmed or non-memory verdict; both together link roles and ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, run_oomwatch

CAPTURED = FIXTURES / "captured"
KERNEL_FILES = ("kmsg.txt", "dmesg.txt", "dmesg-T.txt", "dmesg-iso.txt", "dmesg-x.txt")

# capture -> (verdict from the console alone, confirmed, role of the kernel's victim, rank)
EXPECTED = {
    # a lone Python process in the job's cgroup is the job's training process: "rank" with no number
    "memcg_python_hog": ("no_oom_evidence", False, "rank", None),
    "memcg_dataloader_worker": ("host_oom", False, "dataloader_worker", None),
    "memcg_torchrun_rank": ("host_oom", False, "rank", 1),
    "memcg_distributed_launch_rank": ("host_oom", False, "rank", 1),
    # the launcher names the rank it lost (no pid), the kernel the pid it killed: one process
    "memcg_mp_spawn_rank": ("host_oom", False, "rank", 1),
    "shell_killed": ("host_oom", False, "rank", None),
    "shell_killed_script": ("host_oom", False, "rank", None),
    "shell_killed_dash": ("host_oom", False, "rank", None),
    "shell_killed_interactive": ("host_oom", False, "rank", None),
    "torchrun_healthy": ("no_oom_evidence", False, None, None),
    "torchrun_exception": ("other_crash", True, None, None),
    "torchrun_segfault": ("other_crash", True, None, None),
    "dataloader_shm_enospc": ("shm_exhausted", True, None, None),
    "dataloader_shm_bus_error": ("shm_exhausted", False, None, None),
    "python_memory_error": ("python_memory_error", True, None, None),
    "numpy_unable_to_allocate": ("python_memory_error", True, None, None),
    "torch_cpu_alloc_error": ("python_memory_error", True, None, None),
}


def _diagnose(folder: Path, *names: str) -> dict:
    r = run_oomwatch("diagnose", "-f", "json", *names, cwd=folder)
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    return json.loads(r.stdout)


# captures of several nodes (tools/capture/multinode.py): their files, and the first failure's
# (kind, rank, host) when all of them are given together
MULTI_NODE = {
    "multinode_torchrun_rank_oom": (("node-0.log", "node-1.log", "node-1.dmesg-T.txt"), ("kernel_oom", 3, "node-1")),
}


def test_every_capture_has_an_expectation() -> None:
    assert sorted(p.name for p in CAPTURED.iterdir() if p.is_dir()) == sorted([*EXPECTED, *MULTI_NODE])


@pytest.mark.parametrize("name", sorted(MULTI_NODE))
def test_multi_node_capture_names_the_first_failure(name: str) -> None:
    files, first = MULTI_NODE[name]
    facts = json.loads((CAPTURED / name / "capture.json").read_text())
    out = _diagnose(CAPTURED / name, *files)
    assert (out["verdict"], out["confirmed"]) == ("cgroup_oom", True)
    assert out["victims"][0]["pid"] == facts["oom_reports"][0]["killed_pid"]
    timeline = out["timeline"]
    got = timeline["first_failure"]
    assert (got["kind"], got["rank"], got["host"]) == first
    assert got["pid"] == facts["oom_reports"][0]["killed_pid"]
    assert timeline["collateral_total"] == 3 and {c["role"] for c in timeline["collateral"]} == {"collateral"}


def _kernel_cases() -> list[tuple[str, str]]:
    return [
        (name, f)
        for name in sorted(EXPECTED)
        for f in KERNEL_FILES
        if (CAPTURED / name / f).exists()
        and json.loads((CAPTURED / name / "capture.json").read_text()).get("oom_reports")
    ]


@pytest.mark.parametrize(("name", "kernel_file"), _kernel_cases())
def test_kernel_rendering_gives_the_exact_victim(name: str, kernel_file: str) -> None:
    facts = json.loads((CAPTURED / name / "capture.json").read_text())
    report = facts["oom_reports"][0]
    out = _diagnose(CAPTURED / name, kernel_file)
    assert (out["verdict"], out["confirmed"]) == ("cgroup_oom", True)
    victim = out["victims"][0]
    assert victim["pid"] == report["killed_pid"]
    assert victim["name"] == report["killed_comm"]
    assert victim["anon_rss_bytes"] == report["anon_rss_kB"] * 1024
    assert victim["file_rss_bytes"] == report["file_rss_kB"] * 1024
    assert victim["shmem_rss_bytes"] == report["shmem_rss_kB"] * 1024
    assert victim["cgroup"] == report["task_memcg"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_console_alone(name: str) -> None:
    verdict, confirmed, _, _ = EXPECTED[name]
    out = _diagnose(CAPTURED / name, "console.txt")
    assert (out["verdict"], out["confirmed"]) == (verdict, confirmed)
    if verdict == "host_oom":  # unconfirmed: the output must say what to collect
        assert any("dmesg" in step for step in out["next_steps"])


@pytest.mark.parametrize("name", sorted(n for n, (_, _, role, _) in EXPECTED.items() if role))
def test_console_and_kernel_link_roles(name: str) -> None:
    _, _, role, rank = EXPECTED[name]
    out = _diagnose(CAPTURED / name, "console.txt", "dmesg-T.txt")
    assert out["verdict"] == "cgroup_oom"
    victim = out["victims"][0]
    assert (victim["role"], victim["rank"]) == (role, rank)
