"""memory.oom.group kills: one failure, the chosen victim first, the others killed with it.

The real report (tests/fixtures/kernel/lkml-5.0-oom-group.log, SOURCES.md) is a 5.0 memcg OOM
quoted in a linux-mm reply; the other lines follow mm/memcontrol.c `mem_cgroup_print_oom_group`
("Tasks in %s are going to be killed due to memory.oom.group set") and mm/oom_kill.c
`__oom_kill_process`, which prints one kill line per task of the group.
"""

from __future__ import annotations

from pathlib import Path

from oomwatch.engine import kernel_lines as kl
from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.kernel_report import assemble_kernel_reports
from oomwatch.engine.model import Line
from oomwatch.engine.prefix import strip_prefix
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.scanner import Scanner

RULES = load_rules()
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "kernel" / "lkml-5.0-oom-group.log"
KB = 1024


def _diag(name: str, text: str):
    scanner = Scanner(RULES)
    return diagnose([scanner.scan(name, [text.encode()])], RULES)


def _lines(texts: list[str]) -> list[Line]:
    return [Line("t.log", i, None, t) for i, t in enumerate(texts, 1)]


def test_parse_oom_group() -> None:
    line = "Tasks in /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f.slice/cri-containerd-9a.scope are going to be killed due to memory.oom.group set"
    assert kl.parse_oom_group(line) == (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f.slice/cri-containerd-9a.scope"
    )
    assert kl.parse_oom_group("Tasks in /a killed as a result of limit of /a") is None
    assert kl.parse_oom_group("Tasks state (memory values in pages):") is None


def test_real_group_kill_is_one_report_with_its_victim_first() -> None:
    d = _diag(FIXTURE.name, FIXTURE.read_text())
    assert d.facts["kernel.kills"] == 1
    assert d.facts["kernel.reports"] == 1
    assert d.facts["kernel.group_kills"] == 11
    assert [v.pid for v in d.victims] == [9188]
    v = d.victims[0]
    assert (v.name, v.anon_rss_bytes, v.file_rss_bytes, v.cgroup) == ("a.out", 10324 * KB, 504 * KB, "/test1")
    note = next(n for n in d.notes if "memory.oom.group" in n)
    assert note.startswith("11 processes killed with it (memory.oom.group set on /test1): pid 1 (systemd, 1.2 MiB")
    assert "and 6 more" in note
    assert not any("killed 12 processes" in n or "killed 11 processes" in n for n in d.notes)


def test_group_members_sizes_and_lines() -> None:
    reports = assemble_kernel_reports(_lines([strip_prefix(t).text for t in FIXTURE.read_text().splitlines()]))
    assert len(reports) == 1
    r = reports[0]
    assert r.oom_group == "/test1"
    assert [t.pid for t in r.group_killed] == [1, 9182, 9183, 9184, 9185, 9186, 9187, 9189, 9190, 9191, 9192]
    first = r.group_killed[0]
    assert (first.name, first.anon_rss_bytes, first.file_rss_bytes, first.shmem_rss_bytes) == (
        "systemd",
        1228 * KB,
        3992 * KB,
        0,
    )
    assert r.reaped
    assert any("memory.oom.group" in e.text for e in r.evidence)


def test_kills_without_the_group_line_stay_separate_reports() -> None:
    texts = [
        "Memory cgroup out of memory: Killed process 20121 (stress) total-vm:154392kB, anon-rss:51200kB, file-rss:0kB, shmem-rss:0kB",
        "Memory cgroup out of memory: Killed process 20094 (stress) total-vm:154392kB, anon-rss:1024kB, file-rss:0kB, shmem-rss:0kB",
    ]
    reports = assemble_kernel_reports(_lines(texts))
    assert [r.victim_pid for r in reports] == [20121, 20094]
    assert all(not r.group_killed for r in reports)


def test_group_line_first_the_victims_line_cut_off() -> None:
    # an abridged paste: the group line, then the kills (the chosen victim's line not pasted)
    texts = [
        "Tasks in /kubepods/burstable/pod77f0/cri-containerd-1a.scope are going to be killed due to memory.oom.group set",
        "Memory cgroup out of memory: Killed process 20121 (stress) total-vm:154392kB, anon-rss:51200kB, file-rss:0kB, shmem-rss:0kB",
        "Memory cgroup out of memory: Killed process 20094 (stress) total-vm:154392kB, anon-rss:1024kB, file-rss:0kB, shmem-rss:0kB",
    ]
    reports = assemble_kernel_reports(_lines(texts))
    assert len(reports) == 1
    assert reports[0].victim_pid == 20121
    assert [t.pid for t in reports[0].group_killed] == [20094]
    assert reports[0].constraint == "memcg"


def test_a_second_oom_after_a_group_kill_is_its_own_report() -> None:
    texts = [
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/pod,task_memcg=/pod,task=python,pid=10,uid=0",
        "Memory cgroup out of memory: Killed process 10 (python) total-vm:100kB, anon-rss:90kB, file-rss:0kB, shmem-rss:0kB",
        "Tasks in /pod are going to be killed due to memory.oom.group set",
        "Memory cgroup out of memory: Killed process 11 (pt_data_worker) total-vm:100kB, anon-rss:5kB, file-rss:0kB, shmem-rss:0kB",
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/pod2,task_memcg=/pod2,task=python,pid=20,uid=0",
        "Memory cgroup out of memory: Killed process 20 (python) total-vm:100kB, anon-rss:80kB, file-rss:0kB, shmem-rss:0kB",
    ]
    reports = assemble_kernel_reports(_lines(texts))
    assert [(r.victim_pid, [t.pid for t in r.group_killed]) for r in reports] == [(10, [11]), (20, [])]


def test_a_group_member_named_twice_is_one() -> None:
    texts = [
        "Memory cgroup out of memory: Killed process 10 (python) total-vm:100kB, anon-rss:90kB, file-rss:0kB, shmem-rss:0kB",
        "Tasks in /pod are going to be killed due to memory.oom.group set",
        "Memory cgroup out of memory: Killed process 10 (python) total-vm:100kB, anon-rss:90kB, file-rss:0kB, shmem-rss:0kB",
        "Memory cgroup out of memory: Killed process 11 (bash) total-vm:100kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
        "Memory cgroup out of memory: Killed process 11 (bash) total-vm:100kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB",
    ]
    (r,) = assemble_kernel_reports(_lines(texts))
    assert r.victim_pid == 10
    assert [t.pid for t in r.group_killed] == [11]
