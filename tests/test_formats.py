"""Formats people paste that were missed (issue 13, scope 5): each a small log made of real or
documented lines (sources in tests/fixtures/formats/README.md), diagnosed end to end by the command
line: verdict, confirmed, exit code, and the victim where the log names one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_oomwatch

HERE = Path(__file__).parent / "fixtures" / "formats"

# file: (verdict, confirmed, exit code, first victim's (pid, role, rank) or None, a line of the evidence)
CASES = {
    "airflow_k8s_executor_oomkilled.log": ("cgroup_oom", True, 3, None, 3),
    "spark_driver_pod_status.log": ("cgroup_oom", True, 3, None, 12),
    "kubectl_get_pod_yaml_laststate.log": ("cgroup_oom", True, 3, None, 9),
    "kubectl_describe_evicted_memory.log": ("userspace_oom_kill", True, 3, None, 5),
    "kubectl_get_pods_evicted.log": ("userspace_oom_kill", False, 3, None, 2),
    "keras_progbar_glued_killed.log": ("host_oom", False, 3, None, 4),
    "tqdm_ansi_glued_killed.log": ("host_oom", False, 3, None, 1),
    "tqdm_cr_segfault_glued.log": ("other_crash", True, 4, None, 1),
    "ray_worker_system_error.log": ("host_oom", False, 3, (288692, "unknown", None), 2),
    "ray_memory_monitor_kill.log": ("userspace_oom_kill", True, 3, (4331, "unknown", None), 5),
    "deepspeed_single_child_rc_minus9.log": ("host_oom", False, 3, (13266, "rank", 0), 3),
    "mpich_bad_termination_two_ranks.log": ("host_oom", False, 3, (31670, "rank", 0), 6),
    "mp_spawn_rank_sigkill.log": ("host_oom", False, 3, (None, "rank", 1), 7),
    "dataloader_worker_interrupt.log": ("other_crash", True, 4, (30154, "dataloader_worker", None), 5),
    "airflow_task_negsignal_sigkill.log": ("host_oom", False, 3, None, 2),
    "proc_meminfo_swap_full.log": ("swap_thrash", False, 3, None, 8),
    "vmstat_s_swap_full.log": ("swap_thrash", False, 3, None, 6),
    "proc_meminfo_swap_free.log": ("no_oom_evidence", False, 0, None, None),
    "earlyoom_mem_nearly_gone.log": ("swap_thrash", False, 3, None, 6),
    "earlyoom_mem_plenty.log": ("no_oom_evidence", False, 0, None, None),
    "lone_trigger_line.log": ("host_oom", True, 3, None, 2),
}


def _diagnose(name: str) -> tuple[int, dict]:
    r = run_oomwatch("diagnose", "-f", "json", str(HERE / name))
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    return r.returncode, json.loads(r.stdout)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_missed_format_is_diagnosed(name: str) -> None:
    verdict, confirmed, code, victim, line = CASES[name]
    rc, doc = _diagnose(name)
    assert (doc["verdict"], doc["confirmed"], rc) == (verdict, confirmed, code), doc["summary"]
    if victim is not None:
        v = doc["victims"][0]
        assert (v["pid"], v["role"], v["rank"]) == victim, doc["victims"]
    if line is not None:
        assert line in {e["line"] for e in doc["evidence"]}, doc["evidence"]


def test_the_named_pod_or_container_of_an_eviction_is_no_process() -> None:
    _, doc = _diagnose("kubectl_describe_evicted_memory.log")
    assert (doc["victims"][0]["name"], doc["victims"][0]["role"]) == ("trainer", "unknown")
    _, doc = _diagnose("kubectl_get_pods_evicted.log")
    assert doc["victims"][0]["name"] == "trainer-worker-0"
    assert "kubectl get pod" in " ".join(doc["next_steps"])


def test_a_ray_worker_death_is_not_the_crash_its_actor_error_looks_like() -> None:
    _, doc = _diagnose("ray_worker_system_error.log")
    assert not any(e["kind"] == "crash" for e in doc["events"]), [e["kind"] for e in doc["events"]]
    assert "container or job memory limit is as likely" in doc["summary"]


def test_the_second_mpich_banner_is_the_second_ranks_kill() -> None:
    _, doc = _diagnose("mpich_bad_termination_two_ranks.log")
    assert [(v["pid"], v["rank"]) for v in doc["victims"]] == [(31670, 0), (31671, 1)]


@pytest.mark.parametrize("name", ["keras_progbar_glued_killed.log", "lone_trigger_line.log"])
def test_lone_evidence_says_a_limit_is_as_likely_and_what_tells_them_apart(name: str) -> None:
    _, doc = _diagnose(name)
    assert "as likely" in doc["summary"], doc["summary"]
    assert "dmesg -T" in " ".join(doc["next_steps"]), doc["next_steps"]


def test_many_launchers_children_name_no_one() -> None:
    """DeepSpeed stopping two children: which of them failed is not said, only the rank."""
    text = (HERE / "deepspeed_single_child_rc_minus9.log").read_text()
    two = text.replace(
        "Killing subprocess 13266\n",
        "Killing subprocess 13266\n[2023-04-14 13:11:26,871] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13267\n",
    )
    r = run_oomwatch("diagnose", "-f", "json", "-", stdin=two.encode())
    v = json.loads(r.stdout)["victims"][0]
    assert (v["pid"], v["role"], v["rank"]) == (None, "rank", 0)


def test_a_rank_the_launcher_lost_and_the_kernels_lone_rank_kill_are_one_victim() -> None:
    spawn = (HERE / "mp_spawn_rank_sigkill.log").read_text()
    kill = (
        "[ 200.000000] Memory cgroup out of memory: Killed process 4242 (pt_main_thread) total-vm:100kB, "
        "anon-rss:2048kB, file-rss:4kB, shmem-rss:0kB, UID:0 pgtables:40kB oom_score_adj:0\n"
    )
    r = run_oomwatch("diagnose", "-f", "json", "-", stdin=(spawn + kill).encode())
    victims = json.loads(r.stdout)["victims"]
    assert [(v["pid"], v["role"], v["rank"]) for v in victims] == [(4242, "rank", 1)], victims
