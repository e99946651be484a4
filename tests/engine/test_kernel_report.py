"""Kernel OOM-killer report assembly: real reports (k-*.log) and format-exact synthetic ones.

Fixtures and their sources: tests/fixtures/kernel/SOURCES.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oomwatch.engine import kernel_body as kb
from oomwatch.engine import kernel_lines as kl
from oomwatch.engine.kernel_report import (
    KERNEL_ANCHORS,
    KernelReportAssembler,
    assemble_kernel_reports,
    has_anchor,
)
from oomwatch.engine.model import Evidence, Line, OomReport, TaskRow

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kernel"
PAGE = 4096
KB = 1024

try:
    from oomwatch.engine.prefix import strip_prefix
except ImportError:  # pragma: no cover - the prefix module is developed in parallel
    strip_prefix = None

# Fallback prefix stripper: [dmesg] / [dmesg -T] and BSD syslog `Mon dd hh:mm:ss [host ]tag: `.
_LOCAL_PREFIX = re.compile(
    r"^(?:(?P<bsd>\w{3} +\d+ \d\d:\d\d:\d\d) (?:(?P<host>[\w.-]+) )?(?P<tag>[\w/.-]+)(?:\[\d+\])?: )?"
    r"(?:\[(?P<ts>\s*\d+\.\d+|\w+ +\w+ +\d+ \d\d:\d\d:\d\d \d{4})\] ?)?"
)


def make_line(file: str, no: int, raw: str) -> Line:
    if strip_prefix is not None:
        p = strip_prefix(raw)
        return Line(file, no, p.time, p.text, kernel=p.kernel, host=p.host)
    m = _LOCAL_PREFIX.match(raw)
    assert m is not None
    time = " ".join((m.group("bsd") or m.group("ts") or "").split()) or None
    return Line(file, no, time, raw[m.end() :], kernel=m.group("tag") == "kernel", host=m.group("host"))


def load_lines(name: str) -> list[Line]:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    raw_lines = text.split("\n")
    if raw_lines and raw_lines[-1] == "":
        raw_lines.pop()
    return [make_line(name, i, raw) for i, raw in enumerate(raw_lines, 1)]


def reports_of(name: str) -> list[OomReport]:
    return assemble_kernel_reports(load_lines(name))


def one_report(name: str) -> OomReport:
    reports = reports_of(name)
    assert len(reports) == 1, reports
    return reports[0]


def lines_from(texts: list[str], file: str = "t.log", host: str | None = None) -> list[Line]:
    return [Line(file, i, None, t, host=host) for i, t in enumerate(texts, 1)]


def row(report: OomReport, pid: int) -> TaskRow:
    return next(t for t in report.tasks if t.pid == pid)


# --- the published reports, against their yaml labels --------------------------------

# file: (victim pid, victim name, anon_rss_kb or None, constraint)
EXPECTED = {
    "k-001.log": (13536, "memorymonster", 920, "memcg"),
    "k-002.log": (1532, "badsysprogram", 1595164, "global"),
    "k-003.log": (1381, "gunpowder-memho", 18624, "memcg"),
    "k-004.log": (1667, "gunpowder-memho", 248180, "memcg"),
    "k-005.log": (966, "manager", None, "memcg"),
    "k-006.log": (473206, "doxygen", 9234320, "global"),
    "k-007.log": (3902942, "php-fpm", 12625252, "memcg"),
    "k-008.log": (6576, "mysqld", 20629004, "global"),
    "k-009.log": (651, "unattended-upgr", 8380, "global"),
    "k-019.log": (8730, "python", 12553380, "memcg"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reference_victim_and_constraint(name: str) -> None:
    pid, victim, anon_kb, constraint = EXPECTED[name]
    r = one_report(name)
    assert r.file == name
    assert r.killed
    assert (r.victim_pid, r.victim_name, r.constraint) == (pid, victim, constraint)
    assert r.anon_rss_bytes == (None if anon_kb is None else anon_kb * KB)
    assert r.evidence and all(isinstance(e, Evidence) and e.file == name for e in r.evidence)


def test_trigger_is_not_the_victim_k008() -> None:
    r = one_report("k-008.log")
    assert (r.trigger_name, r.trigger_pid) == ("sed", 29481)
    assert (r.victim_name, r.victim_pid) == ("mysqld", 6576)
    assert r.gfp_mask == "0x201da" and r.order == 0
    assert (r.selected_pid, r.selected_name) == (6576, "mysqld")
    assert r.mem_total_bytes == 8379834 * PAGE
    assert (r.free_swap_bytes, r.total_swap_bytes) == (0, 8388604 * KB)
    assert not r.manual


def test_sysrq_manual_k009() -> None:
    r = one_report("k-009.log")
    assert r.manual
    assert (r.trigger_name, r.trigger_pid, r.order) == ("kworker/0:2", 735, -1)
    assert any(e.text == "Workqueue: events moom_callback" for e in r.evidence)
    assert r.task_memcg == "/system.slice/unattended-upgrades.service"


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - {"k-009.log"}))
def test_real_pressure_is_not_manual(name: str) -> None:
    assert not one_report(name).manual


def test_cgroup_v1_memcg_k001() -> None:
    r = one_report("k-001.log")
    assert (r.task_memcg, r.oom_memcg) == ("/mem2", "/mem2")
    assert (r.memcg_usage_bytes, r.memcg_limit_bytes, r.memcg_failcnt) == (
        980 * KB,
        980 * KB,
        4152239,
    )
    assert r.memcg_stat["rss"] == 980 * KB
    assert r.memcg_stat["writeback"] == 20 * KB
    assert r.memcg_stat["inactive_anon"] == 560 * KB
    assert len(r.memcg_stat) == 10
    assert (r.trigger_name, r.trigger_pid) == ("memorymonster", 13536)
    assert (r.selected_pid, r.victim_pid) == (13536, 13536)
    assert (r.total_vm_bytes, r.file_rss_bytes, r.shmem_rss_bytes) == (
        33558652 * KB,
        452 * KB,
        None,
    )
    assert r.time == "Jan 5 15:19:27"
    assert (r.first_line, r.last_line) == (5, 35)
    assert [e.line for e in r.evidence] == [5, 27, 28, 34, 35]


def test_cgroup_v1_memory_swap_limit_is_not_taken_for_memory_k004() -> None:
    r = one_report("k-004.log")
    assert (r.memcg_usage_bytes, r.memcg_limit_bytes) == (307112 * KB, 307200 * KB)
    assert r.memcg_stat["swap"] == 307288 * KB
    assert r.reaped
    assert r.task_memcg == r.oom_memcg == ("/docker/6c6fcab8562fd3150854986b78552c732f234fd405b624207b8843528a145e70")


def test_cgroup_v2_multiline_stats_k007() -> None:
    r = one_report("k-007.log")
    assert r.memcg_stat["anon"] == 31154200576
    assert r.memcg_stat["file"] == 688283648
    assert r.memcg_stat["shmem"] == 687980544
    assert r.memcg_stat["thp_collapse_alloc"] == 0
    assert len(r.memcg_stat) == 40
    assert (r.memcg_usage_bytes, r.memcg_limit_bytes, r.memcg_failcnt) == (
        31211520 * KB,
        31211520 * KB,
        83420,
    )
    assert r.oom_memcg == "/lxc/39004"
    assert r.task_memcg.startswith("/lxc/39004/ns/system.slice/docker-a59e4e7d")
    assert (r.trigger_pid, r.victim_pid) == (3923954, 3902942)
    assert (r.victim_uid, r.shmem_rss_bytes, r.oom_score_adj) == (1000, 156088 * KB, 0)
    assert len(r.tasks) == 73
    assert r.time == "Di Aug 12 03:54:03 2025"


def test_cgroup_v2_stats_dmesg_continuation_synthetic_68() -> None:
    r = one_report("synthetic-6.8-memcg-v2.log")
    assert r.memcg_stat["anon"] == 16870633472
    assert r.memcg_stat["inactive_anon"] == 16882921472
    assert r.memcg_stat["pgfault"] == 9123344
    assert len(r.memcg_stat) == 34
    assert (r.memcg_usage_bytes, r.memcg_limit_bytes) == (16777216 * KB, 16777216 * KB)


def test_summary_only_k005() -> None:
    r = one_report("k-005.log")
    assert r.oom_memcg == "/kubepods/burstable/podfbdfe8e3-1c87-4ff2-907c-b2ec8e25d012"
    assert r.task_memcg == (
        "/kubepods/burstable/podfbdfe8e3-1c87-4ff2-907c-b2ec8e25d012/"
        "ef807430361e6e82b45db92e2e9b6fbec98f419b12c591e655c1a725565e73a8"
    )
    assert (r.victim_uid, r.trigger_name, r.tasks) == (0, None, ())


def test_grepped_report_k019() -> None:
    r = one_report("k-019.log")
    assert (r.trigger_name, r.first_line, r.last_line) == ("python", 8, 12)
    assert r.oom_memcg == r.task_memcg
    assert (r.victim_uid, r.total_vm_bytes) == (0, 48486172 * KB)


@pytest.mark.parametrize(
    ("name", "reaped"),
    [("k-001.log", False), ("k-003.log", True), ("k-004.log", True), ("k-006.log", True)],
)
def test_reaper(name: str, reaped: bool) -> None:
    r = one_report(name)
    assert r.reaped is reaped
    assert any(e.text.startswith("oom_reaper:") for e in r.evidence) is reaped


def test_meminfo_k002_k006() -> None:
    r = one_report("k-002.log")
    assert r.mem_total_bytes == 445340 * PAGE
    assert (r.free_swap_bytes, r.total_swap_bytes) == (0, 0)
    r = one_report("k-006.log")
    assert r.mem_total_bytes == 4115400 * PAGE
    assert (r.free_swap_bytes, r.total_swap_bytes) == (84 * KB, 25165820 * KB)
    assert r.gfp_mask == "0x140dca(GFP_HIGHUSER_MOVABLE|__GFP_COMP|__GFP_ZERO)"


# --- selected vs killed -------------------------------------------------------------------


def test_child_sacrificed_2632() -> None:
    r = one_report("synthetic-2.6.32.log")
    assert (r.selected_pid, r.selected_name) == (4100, "python")
    assert (r.victim_pid, r.victim_name) == (4107, "python")
    assert r.trigger_pid == 4108
    assert r.constraint == "global"
    assert r.total_vm_bytes == 9282068 * KB  # "vsz:" in 2.6.32
    assert (r.anon_rss_bytes, r.file_rss_bytes) == (6008800 * KB, 440 * KB)
    assert r.victim_uid == 1000  # from the task table row
    assert r.mem_total_bytes == 2097136 * PAGE


def test_child_sacrificed_414() -> None:
    r = one_report("synthetic-4.14-sacrifice-child.log")
    assert (r.selected_pid, r.victim_pid, r.trigger_pid) == (2001, 2107, 2107)
    assert r.gfp_mask == "0x14280ca(GFP_HIGHUSER_MOVABLE|__GFP_ZERO)"
    assert r.order == 0
    assert r.anon_rss_bytes == 9559820 * KB
    assert r.reaped
    assert [e.line for e in r.evidence] == [1, 48, 49, 50]


def test_rhel6_uid_before_name() -> None:
    r = one_report("synthetic-rhel6-2.6.32.log")
    assert (r.victim_pid, r.victim_name, r.victim_uid) == (4144, "mysqld", 497)
    assert r.anon_rss_bytes == 31443592 * KB
    assert r.constraint == "global"


# --- task tables, one per column layout -------------------------------------------------


def test_task_table_2632_cpu_oom_adj() -> None:
    r = one_report("synthetic-2.6.32.log")
    assert len(r.tasks) == 7
    t = row(r, 4107)
    assert (t.uid, t.tgid, t.name) == (1000, 4107, "python")
    assert (t.total_vm_bytes, t.rss_bytes) == (2320517 * PAGE, 1502310 * PAGE)
    assert (t.swap_bytes, t.oom_score_adj, t.anon_rss_bytes) == (None, None, None)
    assert row(r, 1).name == "init"


def test_task_table_rhel6_oom_adj_and_score_adj() -> None:
    r = one_report("synthetic-rhel6-2.6.32.log")
    t = row(r, 602)
    assert (t.name, t.oom_score_adj, t.rss_bytes) == ("udevd", -1000, 217 * PAGE)
    assert row(r, 4144).total_vm_bytes == 10443009 * PAGE


def test_task_table_3x_nr_ptes() -> None:
    r = one_report("k-002.log")
    assert len(r.tasks) == 28
    t = row(r, 1532)
    assert (t.uid, t.total_vm_bytes, t.rss_bytes, t.swap_bytes, t.oom_score_adj) == (
        1020,
        410347 * PAGE,
        398810 * PAGE,
        0,
        0,
    )
    assert row(r, 293).oom_score_adj == -1000
    assert t.line == 79


def test_task_table_3x_large_uid_k001() -> None:
    t = row(one_report("k-001.log"), 13536)
    assert (t.uid, t.rss_bytes, t.swap_bytes) == (275858, 343 * PAGE, 8324326 * PAGE)


def test_task_table_4x_nr_pmds() -> None:
    t = row(one_report("k-003.log"), 1381)
    assert (t.total_vm_bytes, t.rss_bytes, t.swap_bytes, t.name) == (
        530382 * PAGE,
        5191 * PAGE,
        5489 * PAGE,
        "gunpowder-memho",
    )


def test_task_table_419_pgtables_bytes() -> None:
    r = one_report("k-006.log")
    assert len(r.tasks) == 112
    t = row(r, 473206)
    assert (t.rss_bytes, t.swap_bytes, t.total_vm_bytes) == (
        2308581 * PAGE,
        5225427 * PAGE,
        7572670 * PAGE,
    )
    assert row(r, 694).name == "(sd-pam)"
    assert row(r, 693).oom_score_adj == 100


def test_task_table_68_rss_split_and_odd_names() -> None:
    r = one_report("synthetic-6.8-memcg-v2.log")
    t = row(r, 5123)
    assert t.name == "python3 (train)"
    assert (t.rss_bytes, t.anon_rss_bytes, t.file_rss_bytes, t.shmem_rss_bytes) == (
        3221500 * PAGE,
        3200100 * PAGE,
        18400 * PAGE,
        3000 * PAGE,
    )
    assert (t.swap_bytes, t.oom_score_adj, t.uid) == (0, 969, 1000)
    assert row(r, 5177).name == "tokio::worker"
    assert (r.victim_name, r.victim_pid, r.trigger_pid) == ("python3 (train)", 5123, 5140)
    assert (r.anon_rss_bytes, r.file_rss_bytes, r.shmem_rss_bytes) == (
        12800400 * KB,
        73600 * KB,
        12000 * KB,
    )
    assert (r.victim_uid, r.oom_score_adj, r.reaped) == (1000, 969, True)
    assert r.task_memcg.endswith(
        "/cri-containerd-9b8a7c6d5e4f30211f2e3d4c5b6a79881726354a5b6c7d8e9f0a1b2c3d4e5f60.scope"
    )


# Rows of the task table pasted without its header (the lines above were not copied). Shapes of
# kernels 4.19-5.x (7 numbers after the pid), 4.x (8) and 6.x (10), one row with tabs in its padding.
BARE_ROWS = {
    "5.x": [
        "[ 1433.437417] [   6560]  1000  6560 \t2736  \t649\t57344    \t0         \t0 zsh",
        "[ 1433.437419] [   6762]  1000  6762   898879   127313  2678784    \t0         \t0 firefox",
        "[ 1433.437425] [   7251]  1000  7251   525959\t28506   905216    \t0         \t0 okular",
    ],
    "4.x": [
        "[  812.1] [  401]     0   401    10980      610      24       3        0             0 systemd-journal",
        "[  812.2] [ 9120]  1000  9120  6291456  4030100    8100      27        0             0 python3",
        "[  812.3] [ 9133]  1000  9133  6291456  3900022    8000      27        0             0 pt_data_worker",
    ],
    "6.x": [
        "[  5.1] [   7001]  1000  7001  3000000  2000000  1990000    10000        0 16000000        0  0 python3",
        "[  5.2] [   7002]  1000  7002  3000000   500000   499000     1000        0  4000000        0  0 python3",
        "[  5.3] [   7003]     0  7003    10000      100       50       50        0    65536        0  -999 sshd",
    ],
}


@pytest.mark.parametrize("kernel", sorted(BARE_ROWS))
def test_task_rows_alone_are_a_report(kernel: str) -> None:
    lines = [make_line("rows.log", i, raw) for i, raw in enumerate(BARE_ROWS[kernel], 1)]
    (r,) = assemble_kernel_reports(lines)
    assert [t.pid for t in r.tasks] == [int(raw.split("[")[2].split("]")[0]) for raw in BARE_ROWS[kernel]]
    assert r.victim_pid is None and r.constraint is None  # nothing says which died, nor which limit
    big = max(r.tasks, key=lambda t: t.rss_bytes or 0)
    assert big.rss_bytes is not None and big.rss_bytes > 100_000 * PAGE
    if kernel == "6.x":
        assert big.anon_rss_bytes == 1990000 * PAGE


@pytest.mark.parametrize(
    "rows",
    [
        BARE_ROWS["5.x"][:2],  # two rows: too little to be sure
        # the pid in brackets and numbers after it, but the second number is not the pid (not a tgid)
        ["[ 12] 3 4 5 6 7 8 9 step", "[ 13] 3 4 5 6 7 8 9 step", "[ 14] 3 4 5 6 7 8 9 step"],
        # a metrics table: too few columns
        ["[ 1] 1 1 2 3 loss", "[ 2] 2 2 2 3 loss", "[ 3] 3 3 2 3 loss"],
    ],
)
def test_row_shaped_lines_that_are_not_a_task_table(rows: list[str]) -> None:
    assert assemble_kernel_reports([make_line("x.log", i, raw) for i, raw in enumerate(rows, 1)]) == []


# --- several reports, hosts, files ---------------------------------------------------------


def test_two_hosts_interleaved() -> None:
    reports = reports_of("synthetic-5.15-two-hosts.log")
    assert [(r.victim_pid, r.victim_name) for r in reports] == [
        (7001, "python"),
        (8123, "pt_main_thread"),
    ]
    a, b = reports
    assert (a.first_line, b.first_line) == (1, 2)
    assert (a.trigger_pid, b.trigger_pid) == (7003, 8123)
    assert [t.pid for t in a.tasks] == [1201, 7001, 7003]
    assert [t.pid for t in b.tasks] == [1190, 8123, 8140]
    assert a.reaped and b.reaped
    assert (a.task_memcg, b.task_memcg) == (
        "/user.slice/user-1000.slice/session-4.scope",
        "/system.slice/train.service",
    )
    assert a.anon_rss_bytes == 500004936 * KB
    assert all(e.text.find("pt_main_thread") < 0 for e in a.evidence)


def test_several_reports_same_host_in_order() -> None:
    raw = (FIXTURES / "k-003.log").read_text().splitlines()
    raw += (FIXTURES / "k-004.log").read_text().splitlines()
    lines = [make_line("both.log", i, t) for i, t in enumerate(raw, 1)]
    reports = assemble_kernel_reports(lines)
    assert [r.victim_pid for r in reports] == [1381, 1667]
    assert reports[0].last_line < reports[1].first_line
    assert all(r.reaped for r in reports)
    assert [len(r.tasks) for r in reports] == [1, 1]


def test_files_do_not_mix() -> None:
    asm = KernelReportAssembler()
    asm.feed(Line("a.log", 1, None, "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0"))
    asm.feed(Line("b.log", 1, None, "Killed process 12 (java) total-vm:8kB, anon-rss:4kB, file-rss:0kB"))
    a, b = asm.finish()
    assert (a.file, a.trigger_name, a.victim_pid) == ("a.log", "python", None)
    assert (b.file, b.victim_pid, b.trigger_name) == ("b.log", 12, None)


# --- the feeding contract ------------------------------------------------------------------


def fed_lines(lines: list[Line], asm: KernelReportAssembler | None = None) -> list[int]:
    asm = asm or KernelReportAssembler()
    fed = []
    for line in lines:
        if asm.wants_more() or has_anchor(line.text):
            asm.feed(line)
            fed.append(line.no)
    return fed


def test_wants_more_stops_soon_after_kill_k001() -> None:
    lines = load_lines("k-001.log")
    fed = fed_lines(lines)
    assert fed[0] == 5
    assert fed == list(range(5, 41))  # header .. kill (35) + 5 lines of grace
    assert len(lines) == 44


def test_wants_more_lifecycle() -> None:
    asm = KernelReportAssembler()
    assert not asm.wants_more()
    asm.feed(Line("f", 1, None, "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0"))
    assert asm.wants_more()
    asm.feed(Line("f", 2, None, "Out of memory: Killed process 9 (python) total-vm:4kB, anon-rss:4kB"))
    for no in range(3, 8):
        assert asm.wants_more()
        asm.feed(Line("f", no, None, "unrelated"))
    assert not asm.wants_more()
    assert [r.victim_pid for r in asm.finish()] == [9]


def test_cut_off_report_stops_after_idle_cap() -> None:
    texts = ["python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"]
    texts += ["CPU: 1 PID: 77 Comm: python Not tainted 6.1.0 #1", "Call Trace:", " dump_stack+0x1/0x2"]
    texts += [f"epoch {i} step {i * 7} loss=0.{i}" for i in range(5000)]
    lines = lines_from(texts)
    fed = fed_lines(lines)
    assert fed[-1] == 4 + 300
    r = assemble_kernel_reports(lines)[0]
    assert (r.trigger_pid, r.victim_pid, r.killed, r.last_line) == (77, None, False, 4)


def test_total_line_cap() -> None:
    header = "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
    table = "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name"
    rows = [f"[{i:7d}]     0 {i:5d}     1000      100    40960        0             0 worker"
            for i in range(1, 3000)]  # fmt: skip
    lines = lines_from([header, table, *rows])
    asm = KernelReportAssembler(max_lines=1000)
    fed = fed_lines(lines, asm)
    assert fed[-1] == 1000
    assert len(asm.finish()[0].tasks) == 998


def test_late_reaper_line_after_close() -> None:
    texts = ["Out of memory: Killed process 42 (python) total-vm:8kB, anon-rss:4kB, file-rss:0kB"]
    texts += [f"noise {i}" for i in range(30)]
    texts += ["oom_reaper: reaped process 42 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB"]
    lines = lines_from(texts)
    fed = fed_lines(lines)
    assert fed == [1, 2, 3, 4, 5, 6, 32]
    (r,) = assemble_kernel_reports(lines)
    assert r.reaped and r.victim_pid == 42 and r.evidence[-1].line == 32
    assert r.constraint == "global"


def test_reaper_for_another_pid_is_ignored() -> None:
    texts = [
        "Out of memory: Killed process 42 (python) total-vm:8kB, anon-rss:4kB, file-rss:0kB",
        "oom_reaper: reaped process 43 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
        "oom_reaper: unable to reap pid:42 (python)",
    ]
    (r,) = assemble_kernel_reports(lines_from(texts))
    assert not r.reaped
    assert [e.line for e in r.evidence] == [1, 3]


def test_anchors() -> None:
    assert "invoked oom-killer" in KERNEL_ANCHORS
    assert "oom-kill:constraint=" in KERNEL_ANCHORS
    assert "killed as a result of limit of" in KERNEL_ANCHORS
    for name in EXPECTED:
        lines = load_lines(name)
        reports = assemble_kernel_reports(lines)
        for r in reports:
            assert any(has_anchor(e.text) for e in r.evidence)
    assert not has_anchor("torch.cuda.OutOfMemoryError: CUDA out of memory.")


# --- wordings without a header -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "pid", "name", "anon", "constraint"),
    [
        ("Killed process 1532 (java) total-vm:16kB, anon-rss:8kB, file-rss:4kB", 1532, "java", 8, None),
        ("Out of memory: Killed process 7 (a b (c)) total-vm:16kB, anon-rss:8kB, file-rss:0kB, "
         "shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:-5", 7, "a b (c)", 8, "global"),
        ("Memory cgroup out of memory: Killed process 9 (Chrome_ChildIOT) total-vm:4kB, "
         "anon-rss:2kB, file-rss:0kB, shmem-rss:0kB", 9, "Chrome_ChildIOT", 2, "memcg"),
        ("Out of memory (oom_kill_allocating_task): Killed process 3 (tokio::worker) "
         "total-vm:4kB, anon-rss:1kB, file-rss:0kB", 3, "tokio::worker", 1, "global"),
        ("Killed process 1235 (java) vsz:4096kB, anon-rss:2048kB, file-rss:4kB", 1235, "java", 2048, None),
        ("Killed process 4144, UID 497, (mysqld) total-vm:8kB, anon-rss:4kB, file-rss:0kB",
         4144, "mysqld", 4, None),
        ("Out of memory: Killed process 2603 (flasherav).", 2603, "flasherav", None, "global"),
    ],
)  # fmt: skip
def test_kill_line_wordings(text: str, pid: int, name: str, anon: int | None, constraint: str | None) -> None:
    (r,) = assemble_kernel_reports(lines_from([text]))
    assert (r.victim_pid, r.victim_name, r.constraint) == (pid, name, constraint)
    assert r.anon_rss_bytes == (None if anon is None else anon * KB)
    assert r.evidence == (Evidence("t.log", 1, text),)


def test_kill_line_fields() -> None:
    text = (
        "Out of memory: Killed process 7 (x) total-vm:16kB, anon-rss:8kB, file-rss:4kB, "
        "shmem-rss:2kB, UID:1001 pgtables:4kB oom_score_adj:-5"
    )
    (r,) = assemble_kernel_reports(lines_from([text]))
    assert (r.total_vm_bytes, r.file_rss_bytes, r.shmem_rss_bytes) == (16 * KB, 4 * KB, 2 * KB)
    assert (r.victim_uid, r.oom_score_adj) == (1001, -5)


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        ("CONSTRAINT_NONE", "global"),
        ("CONSTRAINT_MEMCG", "memcg"),
        ("CONSTRAINT_CPUSET", "cpuset"),
        ("CONSTRAINT_MEMORY_POLICY", "mempolicy"),
        ("CONSTRAINT_SOMETHING_NEW", None),
    ],
)
def test_summary_constraints(constraint: str, expected: str | None) -> None:
    text = (
        f"oom-kill:constraint={constraint},nodemask=0-1,cpuset=/,mems_allowed=0,task_memcg=/a,b/c,task=x,y,pid=5,uid=7"
    )
    (r,) = assemble_kernel_reports(lines_from([text]))
    assert r.constraint == expected
    assert (r.task_memcg, r.victim_name, r.victim_pid, r.victim_uid) == ("/a,b/c", "x,y", 5, 7)


def test_2632_lowercase_selection_without_kill_line() -> None:
    text = "Out of memory: kill process 1234 (java) score 123 or a child"
    (r,) = assemble_kernel_reports(lines_from([text]))
    assert (r.selected_pid, r.selected_name, r.victim_pid, r.constraint) == (
        1234,
        "java",
        None,
        "global",
    )


def test_selection_then_kill_of_other_pid() -> None:
    texts = [
        "Memory cgroup out of memory: Kill process 100 (python3 (x)) score 990 or sacrifice child",
        "Killed process 101 (pt_data_worker) total-vm:8kB, anon-rss:4kB, file-rss:0kB",
        "Kill process 102 (pt_data_worker) sharing same memory",
    ]
    (r,) = assemble_kernel_reports(lines_from(texts))
    assert (r.selected_pid, r.selected_name) == (100, "python3 (x)")
    assert (r.victim_pid, r.victim_name, r.constraint) == (101, "pt_data_worker", "memcg")
    assert r.last_line == 3


def test_two_kill_lines_without_headers_are_two_reports() -> None:
    texts = [
        "Killed process 1 (a) total-vm:8kB, anon-rss:4kB, file-rss:0kB",
        "Killed process 2 (b) total-vm:8kB, anon-rss:4kB, file-rss:0kB",
        "Killed process 2 (b) total-vm:8kB, anon-rss:4kB, file-rss:0kB",
    ]
    reports = assemble_kernel_reports(lines_from(texts))
    assert [(r.victim_pid, r.first_line, r.last_line) for r in reports] == [(1, 1, 1), (2, 2, 3)]


def test_task_in_line_alone_starts_memcg_report() -> None:
    texts = [
        "Task in /kubepods/pod1/c1 killed as a result of limit of /kubepods/pod1",
        "memory: usage 1048576kB, limit 1048576kB, failcnt 12",
        "memory+swap: usage 1048576kB, limit 9007199254740988kB, failcnt 0",
        "Memory cgroup out of memory: Kill process 5 (python) score 999 or sacrifice child",
        "Killed process 5 (python) total-vm:8kB, anon-rss:4kB, file-rss:0kB, shmem-rss:0kB",
    ]
    (r,) = assemble_kernel_reports(lines_from(texts))
    assert (r.task_memcg, r.oom_memcg, r.constraint) == ("/kubepods/pod1/c1", "/kubepods/pod1", "memcg")
    assert (r.memcg_usage_bytes, r.memcg_failcnt) == (1048576 * KB, 12)


def test_header_variants() -> None:
    texts = [
        "Chrome_ChildIOT invoked oom-killer: gfp_mask=0x6200ca(GFP_HIGHUSER_MOVABLE), "
        "nodemask=(null), order=3, oom_score_adj=300",
        "CPU: 3 UID: 1000 PID: 2222 Comm: Chrome_ChildIOT Not tainted 6.11.0 #1",
        "python3 (foo) invoked oom-killer: gfp_mask=0x201da, order=0, oom_adj=0, oom_score_adj=0",
        "Pid: 3333, comm: python3 (foo) Not tainted 2.6.32-573.el6.x86_64 #1",
        "java invoked oom-killer: gfp_mask=0x201da, order=0, oomkilladj=0",
    ]
    reports = assemble_kernel_reports(lines_from(texts))
    got = [(r.trigger_name, r.trigger_pid, r.gfp_mask, r.order) for r in reports]
    assert got == [
        ("Chrome_ChildIOT", 2222, "0x6200ca(GFP_HIGHUSER_MOVABLE)", 3),
        ("python3 (foo)", 3333, "0x201da", 0),
        ("java", None, "0x201da", 0),
    ]


def test_rsyslog_escaped_newlines() -> None:
    texts = [
        "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "memory: usage 4096kB, limit 4096kB, failcnt 3",
        "Memory cgroup stats for /job.slice:#012anon 4000000#012file 96000#012",
        "Free swap  = 12kB#012Total swap = 24kB#0121000 pages RAM",
    ]
    (r,) = assemble_kernel_reports(lines_from(texts))
    assert r.memcg_stat == {"anon": 4000000, "file": 96000}
    assert (r.free_swap_bytes, r.total_swap_bytes, r.mem_total_bytes) == (12 * KB, 24 * KB, 1000 * PAGE)


# --- robustness ------------------------------------------------------------------------------


def test_garbage_never_raises() -> None:
    huge = "9" * 5000
    texts = [
        "",
        "Out of memory",
        "Kill process",
        "Killed process",
        f"Killed process {huge} (x) total-vm:{huge}kB, anon-rss:{huge}kB, file-rss:1kB",
        "x invoked oom-killer: gfp_mask=0xZZ, order=abc",
        f"CPU: 1 PID: {huge} Comm: x",
        "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
        f"[{huge}]     0     1 {huge}      100    40960        0             0 w",
        "[    12]     0    12     1000",  # truncated row
        "[    13]     0    13     1000      100    409",  # truncated mid-number
        "[    14]     0    14     1000      100    40960        0             0 ok name",
        "oom-kill:constraint=",
        f"oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/x,task=y,pid={huge},uid=1",
        f"memory: usage {huge}kB, limit 1kB, failcnt 1",
        f"Memory cgroup stats for /x: rss:{huge}KB cache:4KB",
        "oom_reaper: reaped process (x), now",
        "Task in  killed as a result of limit of ",
        "\x00\x01\x02 \ufffd Out of memory \ufffd",
        "Out of memory: Kill process -1 (x) score abc",
        "Killed process 5 (unterminated",
        "(" * 3000 + "Killed process 6 (" + ")" * 3000,
        "Memory cgroup out of memory: Kill process 7 ((( score 5 or sacrifice child",
    ]
    reports = assemble_kernel_reports(lines_from(texts))
    assert reports  # something was recognised, nothing raised
    for r in reports:
        assert isinstance(r, OomReport)
        for t in r.tasks:
            assert isinstance(t, TaskRow)
    rows = [t for r in reports for t in r.tasks]
    assert [(t.pid, t.name) for t in rows] == [(14, "ok name")]
    big = [r for r in reports if r.total_vm_bytes is None and r.victim_pid is None]
    assert big  # the kill line with absurd numbers keeps fields None


def test_truncated_report_finishes_with_what_it_has() -> None:
    lines = load_lines("k-006.log")[:80]  # cut in the middle of the task table
    (r,) = assemble_kernel_reports(lines)
    assert (r.trigger_name, r.trigger_pid, r.victim_pid) == ("doxygen", 473206, None)
    assert len(r.tasks) == 80 - 59
    assert r.mem_total_bytes == 4115400 * PAGE
    assert not r.killed


def test_userland_out_of_memory_text_makes_no_report() -> None:
    texts = [
        "RuntimeError: Out of memory while allocating tensor",
        "WARNING: Out of memory, retrying with smaller batch",
        "Kill process group requested by user",
    ]
    assert assemble_kernel_reports(lines_from(texts)) == []


def test_finish_twice_and_reuse() -> None:
    asm = KernelReportAssembler()
    for line in lines_from(["Killed process 1 (a) total-vm:8kB, anon-rss:4kB, file-rss:0kB"]):
        asm.feed(line)
    first = asm.finish()
    assert not asm.wants_more()
    assert asm.finish() == first


# --- per-line helpers ------------------------------------------------------------------------


def test_to_int() -> None:
    assert [kl.to_int(s) for s in ["0", "-1000", "42", "9" * 24]] == [0, -1000, 42, int("9" * 24)]
    assert [kl.to_int(s) for s in [None, "", "-", "9" * 25, "1e3", "0x10", " 1", "١٢"]] == [None] * 8


@pytest.mark.parametrize(
    "header",
    [
        "[ pid ]   uid  tgid total_vm      rss cpu oom_adj name",
        "[ pid ]   uid  tgid total_vm      rss cpu oom_adj oom_score_adj name",
        "[ pid ]   uid  tgid total_vm      rss nr_ptes swapents oom_score_adj name",
        "[ pid ]   uid  tgid total_vm      rss nr_ptes nr_pmds swapents oom_score_adj name",
        "[  pid  ]   uid  tgid total_vm      rss pgtables_bytes swapents oom_score_adj name",
        "[  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes swapents"
        " oom_score_adj name",
    ],
)
def test_table_header_layouts(header: str) -> None:
    cols = kb.parse_table_header(header)
    assert cols is not None and cols[0] == "uid" and cols[-1] == "name"
    values = " ".join(str(i + 1) for i in range(len(cols) - 1))
    t = kb.parse_task_row(f"[  777] {values} my proc", cols, 9)
    assert t is not None and (t.pid, t.name, t.line, t.uid, t.tgid) == (777, "my proc", 9, 1, 2)
    assert (t.total_vm_bytes, t.rss_bytes) == (3 * PAGE, 4 * PAGE)  # pages, always columns 3 and 4


def test_table_header_rejects_other_brackets() -> None:
    assert kb.parse_table_header("[ pid ] something") is None
    assert kb.parse_table_header("[ 5864.708505] hello") is None


@pytest.mark.parametrize(
    ("text", "shaped"),
    [
        (" dump_stack+0x45/0x56", True),
        (" [<ffffffff81720bf6>] dump_stack+0x45/0x56", True),
        (" ffff88072ae10800 ffff8807a4835c48 ffffffff81720bf6 ffff8807a8e86000", True),
        ("active_anon:405991 inactive_anon:57 isolated_anon:0", True),
        ("Node 0 DMA32 free:44592kB min:44640kB", True),
        ("lowmem_reserve[]: 0 1679 1679 1679", True),
        ("445340 pages RAM", True),
        ("CPU    0: hi:    0, btch:   1 usd:   0", True),
        ("sed cpuset=/ mems_allowed=0-1", True),
        ("[ 1532]  1020  1532   410347   398810     788        0             0 badsysprogram", True),
        ("Epoch 3/10: loss=0.231", False),
        ("step 1200", False),
        ("docker0: port 2(veth380a1cd) entered disabled state", False),
        ("INFO:root:saving checkpoint to /ckpt/step_100", False),
    ],
)
def test_report_shape(text: str, shaped: bool) -> None:
    assert kl.is_report_shaped(text) is shaped


def test_a_reaper_line_names_the_victim_of_a_report_whose_kill_line_was_grepped_away():
    # syslog grep'd for "oom" (public paste, mozilla/DeepSpeech#2055): headers, trace line, table header, reaper
    texts = [
        "Apr 25 06:31:56 host kernel: [594675.027262] python invoked oom-killer: gfp_mask=0x14200ca(GFP_HIGHUSER_MOVABLE), nodemask=(null), order=0, oom_score_adj=0",
        "Apr 25 06:31:56 host kernel: [594675.027276]  oom_kill_process+0x220/0x440",
        "Apr 25 06:31:57 host kernel: [594677.436088] oom_reaper: reaped process 29918 (python), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
    ]  # fmt: skip
    texts = [t.split("] ", 1)[1] for t in texts]  # the messages, as the prefix stripper leaves them
    (r,) = assemble_kernel_reports(lines_from(texts))
    assert (r.victim_pid, r.victim_name, r.reaped, r.last_line) == (29918, "python", True, 3)
    # a reaper line of another pid than the kill's names no one new
    texts.insert(
        2, "Out of memory: Killed process 4242 (python) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB"
    )
    (r,) = assemble_kernel_reports(lines_from(texts))
    assert r.victim_pid == 4242
