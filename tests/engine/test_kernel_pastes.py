"""Kernel kill lines as people paste them: re-wrapped, quoted, abridged, stamps cut off.

The fixtures of tests/fixtures/pasted/ are real captures transformed by tools/capture/rewrap.py
(its README); each must give the victim the capture itself gives.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from oomwatch.engine import kernel_body as kb
from oomwatch.engine import kernel_lines as kl
from oomwatch.engine import kernel_wraps as kw
from oomwatch.engine.diagnose import diagnose
from oomwatch.engine.kernel_report import assemble_kernel_reports
from oomwatch.engine.model import Line
from oomwatch.engine.prefix import strip_prefix
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.scanner import Scanner

ROOT = Path(__file__).resolve().parent.parent.parent
CAPTURED = ROOT / "tests" / "fixtures" / "captured"
PASTED = ROOT / "tests" / "fixtures" / "pasted"
RULES = load_rules()
KB = 1024


def _rewrap():
    spec = importlib.util.spec_from_file_location("rewrap", ROOT / "tools" / "capture" / "rewrap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _diag(*paths: Path):
    scanner = Scanner(RULES)
    return diagnose([scanner.scan(p.name, [p.read_bytes()]) for p in paths], RULES)


def _victim(d) -> tuple:
    v = d.victims[0]
    return (d.verdict, v.pid, v.name, v.anon_rss_bytes, v.file_rss_bytes, v.shmem_rss_bytes, v.cgroup)


def _reports(texts: list[str]):
    lines = []
    for i, raw in enumerate(texts, 1):
        pre = strip_prefix(raw)
        lines.append(Line("t.log", i, pre.time, pre.text, kernel=pre.kernel, host=pre.host))
    return assemble_kernel_reports(lines)


def test_the_fixtures_are_what_the_tool_makes() -> None:
    made = _rewrap().made()
    assert len(made) == 8
    for path, text in made.items():
        assert path.read_text(encoding="utf-8") == text, path


@pytest.mark.parametrize("case", ["memcg_dataloader_worker", "memcg_torchrun_rank"])
@pytest.mark.parametrize("form", ["fold80", "quoted72", "syslog_tag", "no_stamp"])
def test_a_pasted_capture_names_the_same_victim(case: str, form: str) -> None:
    whole = _diag(CAPTURED / case / "dmesg-T.txt")
    want = _victim(whole)
    assert want[3] is not None and want[6] is not None  # the capture itself is read whole
    pasted = _diag(PASTED / case / f"{form}.txt")
    assert _victim(pasted) == want
    # and the rest of the report: limit, task table, memory.stat, trigger (only how much of the input
    # the kernel's prefix marks differs)
    assert pasted.facts["tasks.count"] > 0 and pasted.facts["cgroup.limit_bytes"] is not None
    differ = {k for k in whole.facts if whole.facts[k] != pasted.facts.get(k)}
    assert differ <= {"log.kernel_share", "log.has_kernel_log"}
    assert [c.id for c in pasted.causes] == [c.id for c in whole.causes]


def test_launcher_log_with_a_folded_dmesg_names_the_rank() -> None:
    whole = _diag(CAPTURED / "memcg_torchrun_rank" / "console.txt", CAPTURED / "memcg_torchrun_rank" / "dmesg-T.txt")
    folded = _diag(CAPTURED / "memcg_torchrun_rank" / "console.txt", PASTED / "memcg_torchrun_rank" / "fold80.txt")
    assert (folded.victims[0].role, folded.victims[0].rank) == (whole.victims[0].role, whole.victims[0].rank)
    assert _victim(folded) == _victim(whole)


def test_kill_line_wrapped_inside_a_field() -> None:
    (r,) = _reports([
        "Memory cgroup out of memory: Killed process 9188 (a.out) total-vm:14456kB, anon-",
        "rss:10324kB, file-rss:504kB, shmem-rss:0kB",
    ])  # fmt: skip
    assert (r.victim_pid, r.victim_name, r.anon_rss_bytes, r.file_rss_bytes, r.shmem_rss_bytes) == (
        9188, "a.out", 10324 * KB, 504 * KB, 0
    )  # fmt: skip
    assert r.constraint == "memcg"


def test_kill_line_wrapped_before_the_pid_and_quoted() -> None:
    (r,) = _reports([
        "> [Mon Nov 29 10:01:02 2021] Out of memory: Killed",
        "> process 4242 (python3) total-vm:3000kB, anon-rss:2048kB, file-rss:4kB,",
        "> shmem-rss:0kB, UID:1000 pgtables:100kB oom_score_adj:0",
    ])  # fmt: skip
    assert (r.victim_pid, r.victim_name, r.anon_rss_bytes, r.victim_uid, r.oom_score_adj) == (
        4242, "python3", 2048 * KB, 1000, 0
    )  # fmt: skip
    assert r.constraint == "global"
    assert r.time == "Mon Nov 29 10:01:02 2021"


def test_table_header_and_rows_wrapped_either_way() -> None:
    header = (
        "[  pid  ]   uid  tgid total_vm      rss rss_anon rss_file rss_shmem pgtables_bytes swapents oom_score_adj name"
    )
    row = "[  12922]     0 12922   314539   161687   138059    23628         0  1679360        0             0 python3"
    kill = "Memory cgroup out of memory: Killed process 12922 (python3) total-vm:1258156kB, anon-rss:552236kB, file-rss:94512kB, shmem-rss:0kB"
    first = "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
    folded = [first, header[:80], header[80:], row[:75], row[75:], kill]  # inside a word, inside a number
    h, r = header.rindex(" ", 0, 60), row.rindex(" ", 0, 56)
    worded = [first, header[:h], header[h + 1 :], row[:r], row[r + 1 :], kill]  # at a space
    for lines in (folded, worded):
        (rep,) = _reports(lines)
        (t,) = rep.tasks
        assert (t.pid, t.name, t.rss_bytes, t.anon_rss_bytes, t.oom_score_adj) == (
            12922,
            "python3",
            161687 * 4096,
            138059 * 4096,
            0,
        )
        assert rep.victim_pid == 12922


def test_cut_heads_of_report_lines() -> None:
    assert kb.parse_memcg_usage("memory: usage 921600kB, limit 921600kB,") == kb.MemcgUsage(
        921600 * KB, 921600 * KB, None
    )
    header = kl.parse_header("python3 invoked oom-killer:")
    assert header is not None and (header.comm, header.gfp_mask) == ("python3", None)
    assert kl.parse_cpu_pid("CPU: 0 UID: 0 PID: 12922 Comm:") == 12922
    assert kb.is_cut_table_header("[  pid  ]   uid  tgid total_vm      rss")
    assert not kb.is_cut_table_header("[  pid  ]   uid  tgid total_vm      rss name")
    assert kb.is_cut_task_row("[  12922]     0 12922   314539", ("uid", "tgid", "total_vm", "rss", "name"))
    assert not kb.is_cut_task_row(
        "[  12922]     0 12922   314539   161 python3", ("uid", "tgid", "total_vm", "rss", "name")
    )


def test_summary_folded_three_times() -> None:
    summary = (
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/kubepods/burstable/"
        "pod1fd97494-a000-4527-8d9e-08d03b1994e9,task_memcg=/kubepods/burstable/pod1fd97494-a000-4527-8d9e-08d03b1994e9/"
        "cri-containerd-77.scope,task=python,pid=3864781,uid=0"
    )
    (r,) = _reports([summary[i : i + 80] for i in range(0, len(summary), 80)])
    assert (r.victim_pid, r.victim_name, r.constraint) == (3864781, "python", "memcg")
    assert r.task_memcg == "/kubepods/burstable/pod1fd97494-a000-4527-8d9e-08d03b1994e9/cri-containerd-77.scope"


def test_summary_wrapped_in_a_mail_and_the_5_0_constraint() -> None:
    # Yafang Shao, "[PATCH] mm/oom_kill: fix uninitialized oc->constraint", linux-mm 2019-06-14: the
    # "before this patch" line, wrapped after its first comma by the mail; 5.0-5.1 print CONSTRAINT_NONE
    # for a memory cgroup's OOM, which its oom_memcg= gives away
    (r,) = _reports([
        "[  133.078102] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),",
        "cpuset=/,mems_allowed=0,oom_memcg=/foo,task_memcg=/foo,task=bash,pid=7997,uid=0",
    ])  # fmt: skip
    assert (r.victim_pid, r.victim_name, r.oom_memcg, r.task_memcg, r.constraint) == (
        7997,
        "bash",
        "/foo",
        "/foo",
        "memcg",
    )
    (r,) = _reports(
        [
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
            "task_memcg=/user.slice,task=java,pid=1,uid=0"
        ]
    )
    assert r.constraint == "global"


def test_abridged_kill_lines() -> None:
    (r,) = _reports(["Memory cgroup out of memory: Killed process 3864781 (python) anon-rss:1210580kB"])
    assert (r.victim_pid, r.victim_name, r.anon_rss_bytes) == (3864781, "python", 1210580 * KB)
    (r,) = _reports(["Out of memory: Killed process 1234 (python) total-vm:... anon-rss:2048kB, ..."])
    assert (r.victim_pid, r.anon_rss_bytes, r.total_vm_bytes) == (1234, 2048 * KB, None)


def test_a_whole_kill_line_takes_no_unrelated_next_line() -> None:
    reports = _reports([
        "Out of memory: Killed process 4242 (python3) total-vm:3000kB, anon-rss:2048kB, file-rss:4kB, shmem-rss:0kB",
        "rss:999kB loss=0.25",
        "Out of memory: Killed process 4243 (python3) total-vm:3000kB, anon-rss:1kB, file-rss:4kB, shmem-rss:0kB",
        "[ 4244]  1000  4244   1000   100   0   0   0 python3",
    ])  # fmt: skip
    assert [(r.victim_pid, r.anon_rss_bytes) for r in reports] == [(4242, 2048 * KB), (4243, 1 * KB)]
    assert all(len(r.evidence) == 1 for r in reports)


def test_kill_cut_before_pid() -> None:
    assert kl.kill_cut_before_pid("Memory cgroup out of memory: Killed")
    assert kl.kill_cut_before_pid("Out of memory: Killed process")
    assert kl.kill_cut_before_pid("Out of memory (oom_kill_allocating_task): Kil")
    assert not kl.kill_cut_before_pid("Out of memory: Killed process 12 (x)")
    assert not kl.kill_cut_before_pid("Out of memory:")
    assert not kl.kill_cut_before_pid("Out of memory: Kill process 12 (x) score 5 or sacrifice child")
    assert not kl.kill_cut_before_pid("the job ran Out of memory: restarted")


def test_quote_marks_and_bare_tags_are_prefixes() -> None:
    p = strip_prefix("> [   37.128158][ T9185] Memory cgroup out of memory: Killed process 9188 (a.out)")
    assert (p.time, p.text, p.kernel) == ("37.128158", "Memory cgroup out of memory: Killed process 9188 (a.out)", True)
    p = strip_prefix("> > Jan  5 15:19:27 node1 kernel: Out of memory: Killed process 1 (x)")
    assert (p.time, p.host, p.text, p.kernel) == (
        "Jan 5 15:19:27",
        "node1",
        "Out of memory: Killed process 1 (x)",
        True,
    )
    p = strip_prefix("kernel: [ 5864.708505] Out of memory: Killed process 1 (x)")
    assert (p.time, p.text, p.kernel) == ("5864.708505", "Out of memory: Killed process 1 (x)", True)
    # not a quoted log line: kept as it is
    assert strip_prefix("> python train.py --epochs 3").text == "> python train.py --epochs 3"
    assert strip_prefix(">>> import torch").text == ">>> import torch"
    assert kl.unquote("> > Out of memory: Killed process 1 (x)") == "Out of memory: Killed process 1 (x)"
    assert kl.unquote("Out of memory: x > y") == "Out of memory: x > y"


def test_joins_of_a_fold_and_of_a_word_wrap() -> None:
    assert kw.join_kill_text("... total-vm:14456kB, anon-", "rss:10324kB") == "... total-vm:14456kB, anon-rss:10324kB"
    assert kw.join_kill_text("... total-vm:14456kB,", "anon-rss:10324kB") == "... total-vm:14456kB, anon-rss:10324kB"
    assert kw.join_kill_text("Out of memory: Killed", "process 12 (x)") == "Out of memory: Killed process 12 (x)"
    assert kw.join_kill_text("Killed process 12 (pt", "_data_worker)") == "Killed process 12 (pt_data_worker)"
    columns = ("uid", "tgid", "total_vm", "rss", "name")
    row, cut = kw.rejoin_row("[  12]     0    12   3145", "39   161 python3", columns, 7)
    assert cut is None and row is not None and (row.total_vm_bytes, row.name, row.line) == (314539 * 4096, "python3", 7)
    row, cut = kw.rejoin_row("[  12]     0    12", "314539", columns, 7)
    assert (row, cut) == (None, "[  12]     0    12314539")  # still cut: which join is right is not known yet
    assert kw.rejoin_row("[  12]     0    12", "Out of memory", columns, 7) == (None, None)
    assert kw.rejoin_header("[ pid ]   uid  tgid total_vm  r", "ss name") == (columns, None)
    assert kw.rejoin_header("[ pid ]   uid  tgid", "total_vm rss name") == (columns, None)
    assert kw.rejoin_header("[ pid ]   uid  tgid", "loss 0.25 name") == (None, None)
