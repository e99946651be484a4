"""memory.events / memory.oom_control dumps pasted into a log: a block is evidence, a line is not.

Formats: Documentation/admin-guide/cgroup-v2.rst (memory.events: low, high, max, oom, oom_kill,
oom_group_kill) and cgroup-v1/memory.rst (memory.oom_control: oom_kill_disable, under_oom,
oom_kill), printed by mm/memcontrol.c one `key value` line each. The terminal session below has
the shape of public transcripts of a container lab (`exec ./api`, `Killed`, then `cat` of the
cgroup's files, a person's `# comment` after a value).
"""

from __future__ import annotations

from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.memcg_counters import counter_dumps
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.scanner import Scanner

RULES = load_rules()

EVENTS = "low 0\nhigh 0\nmax 1234\noom 3\noom_kill 3\noom_group_kill 1\n"
SESSION = """$ exec ./api
2026/09/17 15:19:18 api listening on :8080
Killed
$ cat $BASE/api/memory.peak
33554432
$ cat $BASE/api/memory.events
low 0
high 0
max 37
oom 1 # caught it
oom_kill 1
oom_group_kill 0
"""


def _diag(text: str, name: str = "log.txt"):
    scanner = Scanner(RULES)
    return diagnose([scanner.scan(name, [text.encode()])], RULES)


def test_memory_events_dump_is_a_cgroup_oom_kill_not_confirmed() -> None:
    d = _diag("+ cat /sys/fs/cgroup/memory.events\n" + EVENTS)
    assert (d.verdict, d.confirmed) == ("cgroup_oom", False)
    assert (d.facts["cgroup.counted_oom_kills"], d.facts["cgroup.counted_ooms"]) == (3, 3)
    assert d.facts["cgroup.counted_group_kills"] == 1
    assert [e.text for e in d.evidence] == ["oom 3", "oom_kill 3", "oom_group_kill 1"]


def test_a_shell_killed_with_the_counters_is_the_cgroup() -> None:
    d = _diag(SESSION)
    assert (d.verdict, d.confirmed) == ("cgroup_oom", False)
    assert d.facts["cgroup.counted_oom_kills"] == 1


def test_memory_oom_control_v1() -> None:
    d = _diag("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert (d.verdict, d.facts["cgroup.counted_oom_kills"]) == ("cgroup_oom", 2)


def test_limit_hit_without_a_kill() -> None:
    d = _diag(EVENTS.replace("oom_kill 3", "oom_kill 0"))
    assert d.verdict == "cgroup_oom"
    assert d.rule == "OW-V-052"
    assert "without a kill" in d.summary


def test_grep_with_file_names_and_one_line_forms() -> None:
    named = "".join(f"/sys/fs/cgroup/kubepods.slice/pod1/memory.events:{line}\n" for line in EVENTS.splitlines())
    assert _diag(named).facts["cgroup.counted_oom_kills"] == 3
    assert _diag("memory.events: low 0 high 0 max 8 oom 2 oom_kill 2\n").facts["cgroup.counted_oom_kills"] == 2
    assert _diag("{'oom_kill_disable': 0, 'under_oom': 0, 'oom_kill': 4}\n").facts["cgroup.counted_oom_kills"] == 4


def test_lone_lines_are_no_dump() -> None:
    # /proc/vmstat has an oom_kill line too, and max/oom lines alone mean nothing
    vmstat = "drop_pagecache 0\ndrop_slab 0\noom_kill 5\nnuma_pte_updates 0\n"
    for text in (vmstat, "max 0\n", "oom 3\nsome text\noom_kill 3\n", "oom_kill 3\noom 3\n"):
        d = _diag(text)
        assert d.facts["cgroup.counted_oom_kills"] is None, text
        assert d.verdict == "no_oom_evidence", text


def test_two_dumps_in_a_row_are_two() -> None:
    scanner = Scanner(RULES)
    scan = scanner.scan("t", [(EVENTS + EVENTS.replace("oom_kill 3", "oom_kill 7")).encode()])
    dumps = counter_dumps(scan.events)
    assert [d.counters.get("oom_kill") for d in dumps] == [3, 7]
    assert _diag(EVENTS + EVENTS.replace("oom_kill 3", "oom_kill 7")).facts["cgroup.counted_oom_kills"] == 7
