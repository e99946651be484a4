"""procfs readers against a fixture tree and against this test process's own live /proc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oomwatch.paths import HostPaths
from oomwatch.procfs import ProcessGone
from oomwatch.procfs.cmdline import read_cmdline
from oomwatch.procfs.environ import read_environ
from oomwatch.procfs.meminfo import read_meminfo
from oomwatch.procfs.pressure import read_memory_pressure
from oomwatch.procfs.smaps_rollup import read_smaps_rollup
from oomwatch.procfs.stat import read_stat
from oomwatch.procfs.statm import read_statm
from oomwatch.procfs.status import read_status
from oomwatch.procfs.vmstat import read_vmstat

FIXTURE = HostPaths(proc=Path(__file__).parents[1] / "fixtures" / "proc" / "python-sleep" / "proc")
READERS = [read_statm, read_status, read_smaps_rollup, read_stat, read_cmdline, read_environ]


def test_fixture_tree():
    assert read_status(FIXTURE, 8595).name == "python3"
    assert read_stat(FIXTURE, 8595).ppid == 8590
    assert read_smaps_rollup(FIXTURE, 8595).pss == 32765 * 1024
    assert read_vmstat(FIXTURE)["oom_kill"] == 171
    assert read_meminfo(FIXTURE)["MemTotal"] > 0
    assert read_memory_pressure(FIXTURE) is None  # the capture host has no /proc/pressure


def test_smaps_fallback_when_rollup_absent(tmp_path):
    pid_dir = tmp_path / "77"
    pid_dir.mkdir()
    (pid_dir / "smaps").write_bytes((FIXTURE.proc / "8595" / "smaps").read_bytes())
    r = read_smaps_rollup(HostPaths(proc=tmp_path), 77)
    assert r.rss == 34040 * 1024


def test_live_self():
    paths = HostPaths()
    pid = os.getpid()
    status = read_status(paths, pid)
    statm = read_statm(paths, pid, page_size=os.sysconf("SC_PAGE_SIZE"))
    stat = read_stat(paths, pid)
    assert stat.pid == pid and stat.ppid == os.getppid()
    assert status.vm_rss is not None and status.vm_rss > 1 << 20
    assert statm.resident is not None and abs(statm.resident - status.vm_rss) < 64 << 20
    assert read_cmdline(paths, pid)[0] == Path(sys.executable).name or read_cmdline(paths, pid)
    rollup = read_smaps_rollup(paths, pid)
    assert rollup.uss is not None and 0 < rollup.uss <= rollup.rss  # type: ignore[operator]
    assert set(read_environ(paths, pid)) <= {"RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}


def test_live_child_environ_keeps_only_rank_keys():
    env = {"PATH": os.environ.get("PATH", ""), "RANK": "5", "LOCAL_RANK": "1", "MY_API_TOKEN": "s3cret"}
    code = "import sys; print('ready', flush=True); sys.stdin.read()"
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        # Popen returns once exec began; the kernel fills in the new environ slightly later (seen
        # here: an empty environ right after Popen), so wait for the child to say it runs.
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        got = read_environ(HostPaths(), child.pid)
    finally:
        child.communicate(b"")
    assert got == {"RANK": "5", "LOCAL_RANK": "1"}


@pytest.mark.parametrize("reader", READERS)
def test_vanished_pid_is_process_gone(reader):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid is gone (reuse within the test is vanishingly unlikely)
    with pytest.raises(ProcessGone):
        reader(HostPaths(), child.pid)


@pytest.mark.parametrize("reader", READERS)
def test_missing_pid_in_fixture_tree_is_process_gone(reader):
    with pytest.raises(ProcessGone):
        reader(FIXTURE, 999999)
