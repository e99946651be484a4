"""A whole dmesg holds many OOM kills: the diagnosis is about the job's own, the others are listed
apart (engine.selection). Inputs: two real captures of this project (two jobs killed in two memory
cgroups 10 s apart on one machine) concatenated either way, as a user pastes a node's whole dmesg."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from oomwatch.engine.api import Engine
from oomwatch.engine.model import OomReport
from oomwatch.engine.selection import select_reports

ROOT = Path(__file__).resolve().parents[2]
JOB_LOG = ROOT / "examples/torchrun-rank-oom/torchrun.log"  # torchrun names rank 1's pid 12922
JOB_DMESG = ROOT / "examples/torchrun-rank-oom/dmesg-T.txt"  # its kill: cgroup ...-12688, limit 900 MiB
OTHER_DMESG = ROOT / "tests/fixtures/captured/memcg_dataloader_worker/dmesg-T.txt"  # pid 12665, ...-12662, 500 MiB


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.load()


def _diagnose(engine: Engine, *inputs: tuple[str, bytes]):
    return engine.diagnose([engine.scan(name, data) for name, data in inputs])


@pytest.mark.parametrize("order", ["job_last", "job_first"])
def test_the_kill_the_launcher_names_is_the_diagnosis_in_either_file_order(engine, order):
    parts = [OTHER_DMESG.read_bytes(), JOB_DMESG.read_bytes()]
    whole = b"".join(parts if order == "job_last" else parts[::-1])
    d = _diagnose(engine, ("torchrun.log", JOB_LOG.read_bytes()), ("dmesg.txt", whole))
    assert d.verdict == "cgroup_oom"
    assert [v.pid for v in d.victims] == [12922]
    assert "oomwatch-capture-12688" in d.summary and "(900.0 MiB)" in d.summary, d.summary
    assert "12662" not in d.summary and "500.0 MiB" not in d.summary
    assert [r.victim_pid for r in d.other_kills] == [12665]
    assert d.other_kills[0].memcg_limit_bytes == 500 * 2**20
    assert d.facts["kernel.kills"] == 1
    # no cause, reason or evidence line comes from the other kill's report
    other = d.other_kills[0]
    lines = [e for c in d.causes for e in c.evidence] + list(d.evidence)
    assert not [e for e in lines if e.file == "dmesg.txt" and other.first_line <= e.line <= other.last_line]
    assert any("listed apart" in n for n in d.notes)
    doc = d.to_json()
    assert doc["other_kills"][0]["pid"] == 12665 and doc["other_kills"][0]["limit_bytes"] == 500 * 2**20


@pytest.mark.parametrize("order", ["job_last", "job_first"])
def test_without_a_job_log_the_latest_kill_by_time_is_the_diagnosis(engine, order):
    parts = [OTHER_DMESG.read_bytes(), JOB_DMESG.read_bytes()]  # 22:46:13 and 22:46:23
    whole = b"".join(parts if order == "job_last" else parts[::-1])
    d = _diagnose(engine, ("dmesg.txt", whole))
    assert [v.pid for v in d.victims] == [12922]
    assert [r.victim_pid for r in d.other_kills] == [12665]
    assert any("the latest kill" in n for n in d.notes), d.notes


def test_one_input_with_one_kill_sets_nothing_aside(engine):
    d = _diagnose(engine, ("torchrun.log", JOB_LOG.read_bytes()), ("dmesg.txt", JOB_DMESG.read_bytes()))
    assert d.other_kills == () and not any("listed apart" in n for n in d.notes)


def _kill(pid: int, time: str | None, *, memcg: str | None = None, host: str | None = None, line: int = 1) -> OomReport:
    return OomReport(
        file="dmesg", first_line=line, last_line=line, time=time, constraint="memcg" if memcg else "global",
        victim_pid=pid, victim_name="python", oom_memcg=memcg, host=host,
    )  # fmt: skip


def test_a_node_running_out_again_within_a_minute_is_one_failure_hours_apart_are_two():
    a = _kill(1, "Sun Nov 29 10:00:00 2026", line=1)
    b = _kill(2, "Sun Nov 29 10:00:40 2026", line=50)
    c = _kill(3, "Sun Nov 29 13:00:00 2026", line=99)
    sel = select_reports([a, b, c], [])
    assert sel.job == (c,) and sel.others == (a, b) and sel.how == "latest"
    d = replace(c, time="Sun Nov 29 10:01:10 2026")  # chained: 10:00:00 - 10:00:40 - 10:01:10
    sel = select_reports([a, b, d], [])
    assert sel.job == (a, b, d) and sel.others == ()


def test_one_cgroups_limit_hit_again_stays_with_the_job_another_cgroups_does_not():
    a = _kill(1, "Sun Nov 29 10:00:00 2026", memcg="/kubepods/pod-a/train")
    b = _kill(2, "Sun Nov 29 12:00:00 2026", memcg="/kubepods/pod-a/train", line=40)
    c = _kill(3, "Sun Nov 29 12:00:05 2026", memcg="/kubepods/pod-b/web", line=80)
    sel = select_reports([a, b, c], [], known=[2])
    assert sel.job == (a, b) and sel.others == (c,) and sel.how == "pid"
    # a global kill and a cgroup's at the same second are two failures
    g = _kill(4, "Sun Nov 29 12:00:05 2026", line=120)
    assert select_reports([b, g], [], known=[4]).others == (b,)


def test_two_nodes_of_a_job_running_out_together_stay_one_failure_without_times_they_do_not():
    a = _kill(1, "Mar 5 23:58:01", host="gpu-a")
    b = _kill(2, "Mar 5 23:58:02", host="gpu-b", line=2)
    assert select_reports([a, b], []).others == ()
    a2, b2 = replace(a, time=None), replace(b, time=None)
    assert select_reports([a2, b2], []).others == (a2,)  # the latest in the input: b2


def test_without_a_pid_the_kill_nearest_the_jobs_own_failure_line_in_time_is_the_diagnosis():
    from oomwatch.engine.model import Event, Line

    early = _kill(1, "2026-11-29T10:00:00Z", memcg="/job-a")
    late = _kill(2, "2026-11-29T12:00:00Z", memcg="/job-b", line=40)
    said = Line("train.log", 7, "2026-11-29T10:00:03Z", "Killed", kernel=False)
    ev = Event("shell_killed", "OW-F-x", said, {})
    sel = select_reports([early, late], [ev])
    assert (sel.job, sel.others, sel.how) == ((early,), (late,), "time")
    far = Event("shell_killed", "OW-F-x", replace(said, time="2026-11-30T10:00:03Z"), {})
    assert select_reports([early, late], [far]).how == "latest"  # a day off: not this kill's line


def test_a_slurm_job_the_lines_name_points_to_the_kill_in_its_cgroup():
    from oomwatch.engine.model import Event, Line

    mine = _kill(1, None, memcg="/slurm/uid_1000/job_4242/step_0")
    other = _kill(2, None, memcg="/slurm/uid_1000/job_4300/step_0", line=40)
    said = Line("slurm-4242.out", 3, None, "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4242.0.")
    sel = select_reports([mine, other], [Event("slurm_oom", "OW-F-x", said, {"job": "4242.0"})])
    assert (sel.job, sel.others, sel.how) == ((mine,), (other,), "job")
