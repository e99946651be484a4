"""procfs parsers on real captures (tests/fixtures/proc/python-sleep) and hostile input."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from oomwatch.procfs.cmdline import parse_cmdline
from oomwatch.procfs.environ import parse_environ
from oomwatch.procfs.meminfo import parse_meminfo
from oomwatch.procfs.pressure import parse_pressure
from oomwatch.procfs.smaps_rollup import parse_smaps, parse_smaps_rollup
from oomwatch.procfs.stat import parse_stat
from oomwatch.procfs.statm import parse_statm
from oomwatch.procfs.status import parse_status
from oomwatch.procfs.vmstat import oom_kill, parse_vmstat

PROC = Path(__file__).parents[1] / "fixtures" / "proc" / "python-sleep" / "proc"
PID = PROC / "8595"
KB = 1024


def test_statm_pages_to_bytes():
    s = parse_statm((PID / "statm").read_text())
    assert s.size == 9263 * 4096
    assert s.resident == 8510 * 4096
    assert s.shared == 1660 * 4096
    assert parse_statm("1 2 3 4 0 5 0", page_size=65536).resident == 2 * 65536


def test_status_captured():
    s = parse_status((PID / "status").read_text())
    assert s.name == "python3"
    assert s.ppid == 8590
    assert s.vm_rss == 34040 * KB
    assert s.rss_anon == 27400 * KB
    assert s.rss_file == 6640 * KB
    assert s.rss_shmem == 0
    assert s.vm_hwm == 34040 * KB
    assert s.vm_swap == 0
    assert s.rss_anon + s.rss_file + s.rss_shmem == s.vm_rss


def test_status_old_kernel_and_odd_names():
    s = parse_status("Name:\tfoo) Z (bar baz\nPPid:\t1\nVmRSS:\t  100 kB\n")
    assert s.name == "foo) Z (bar baz"
    assert s.vm_rss == 100 * KB
    assert s.rss_anon is None and s.vm_swap is None and s.vm_hwm is None


def test_smaps_rollup_captured():
    r = parse_smaps_rollup((PID / "smaps_rollup").read_text())
    assert r.rss == 34040 * KB
    assert r.pss == 32765 * KB
    assert r.pss_anon == 27400 * KB
    assert r.pss_file == 5365 * KB
    assert r.pss_shmem == 0
    assert r.uss == (4980 + 27400) * KB
    assert r.swap == 0 and r.swap_pss == 0


def test_smaps_sum_matches_rollup():
    # both files were read within milliseconds of each other from an idle process
    rollup = parse_smaps_rollup((PID / "smaps_rollup").read_text())
    summed = parse_smaps((PID / "smaps").read_text())
    assert summed.rss == rollup.rss
    assert summed.uss == rollup.uss
    assert summed.swap == rollup.swap
    assert summed.pss is not None and rollup.pss is not None
    assert abs(summed.pss - rollup.pss) <= 64 * KB  # per-mapping rounding of Pss


def test_environ_keeps_only_job_identity():
    data = b"RANK=3\0LOCAL_RANK=1\0WORLD_SIZE=8\0AWS_SECRET_ACCESS_KEY=hunter2\0HF_TOKEN=hf_x\0SLURM_JOB_ID=42\0"
    env = parse_environ(data)
    assert env == {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "SLURM_JOB_ID": "42"}
    assert "hunter2" not in repr(env)
    assert parse_environ(b"") == {}
    assert parse_environ(b"RANK\0=x\0TORCHELASTIC_RUN_ID=abc=d\xff") == {"TORCHELASTIC_RUN_ID": "abc=d\ufffd"}


def test_stat_captured():
    s = parse_stat((PID / "stat").read_text())
    assert (s.pid, s.comm, s.state, s.ppid, s.starttime) == (8595, "python3", "S", 8590, 680069)


@pytest.mark.parametrize(
    ("comm", "state"),
    [("foo) Z ", "S"), ("a b (c) d", "R"), (")", "Z"), ("((", "D"), ("", "S"), ("x\ny", "S")],
)
def test_stat_hostile_comm(comm, state):
    text = f"123 ({comm}) {state} 7 123 123 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 555 0 0\n"
    s = parse_stat(text)
    assert (s.pid, s.comm, s.state, s.ppid, s.starttime) == (123, comm, state, 7, 555)


@pytest.mark.parametrize("text", ["", "123", "123 (trunc", "123 (x) S", "garbage (x) S y", "1 (x) S 1 2 3"])
def test_stat_truncated_never_raises(text):
    s = parse_stat(text)
    assert s.starttime is None


def test_stat_garbage_numbers_are_none():
    s = parse_stat("1 (x) S notanumber 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 zz")
    assert s.ppid is None and s.starttime is None


def test_cmdline():
    assert parse_cmdline((PID / "cmdline").read_bytes()) == [
        "/usr/bin/python3",
        "-c",
        "import time; x=bytearray(20<<20); time.sleep(60)",
    ]
    assert parse_cmdline(b"") == []  # kernel threads, zombies
    assert parse_cmdline(b"a\0\0b\0") == ["a", "", "b"]
    assert parse_cmdline(b"\xff\0")[0].encode("utf-8", "surrogateescape") == b"\xff"


def test_meminfo_captured():
    m = parse_meminfo((PROC / "meminfo").read_text())
    assert m["MemTotal"] > m["MemAvailable"] > 0
    assert m["MemTotal"] % 1024 == 0
    assert {"SwapTotal", "SwapFree", "Shmem"} <= m.keys()
    assert "HugePages_Total" in m  # unit-less count, kept as is


def test_vmstat_captured():
    v = parse_vmstat((PROC / "vmstat").read_text())
    assert oom_kill(v) == 171
    assert oom_kill(parse_vmstat("nr_free_pages 1\n")) is None
    assert parse_vmstat("oom_kill x\n\nbroken\n") == {}


def test_pressure():
    p = parse_pressure(
        "some avg10=0.00 avg60=0.01 avg300=0.04 total=5377120\nfull avg10=0.00 avg60=0.00 avg300=0.02 total=3843339\n"
    )
    assert p.some is not None and p.full is not None
    assert p.some.avg60 == 0.01 and p.some.total_us == 5377120
    assert p.full.avg300 == 0.02
    # /proc/pressure/cpu before 5.13 has no "full" line; garbage values read as None
    q = parse_pressure("some avg10=x avg60=1.5 total=\n")
    assert q.full is None and q.some is not None
    assert (q.some.avg10, q.some.avg60, q.some.avg300, q.some.total_us) == (None, 1.5, None, None)


@pytest.mark.parametrize("parse", [parse_status, parse_smaps_rollup, parse_smaps, parse_meminfo, parse_pressure])
@pytest.mark.parametrize("text", ["", "\n\n", "Rss: lots kB\nPss:\nsome avg10\n", "VmRSS:\t12"])
def test_text_parsers_never_raise(parse, text):
    parse(text)


def test_statm_garbage():
    s = parse_statm("12 x")
    assert s.size == 12 * 4096 and s.resident is None and s.data is None


def test_fast_status_parser_agrees_with_the_general_one():
    """parse_status_bytes (the agent's per-tick path) gives what parse_status gives: on the captured
    file, on every process of this machine (kernel threads and zombies take the general path), and on
    cut or hostile input."""
    from oomwatch.procfs.status import parse_status_bytes

    samples = [(PID / "status").read_bytes()]
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                samples.append(Path("/proc", name, "status").read_bytes())
    full = samples[0]
    samples += [full[:n] for n in range(0, len(full), 97)]  # reads cut anywhere
    samples += [
        b"Name:\tfoo) Z (\\nState:\tR\nState:\tR (running)\nPPid:\t7\n",
        full.replace(b"VmSwap:", b"VmSwap:x"),
        full.replace(b"Name:", b"Nome:"),
        b"\xff\xfe" + full,
    ]
    for data in samples:
        assert parse_status_bytes(data) == parse_status(data.decode("utf-8", "replace")), data[:80]
