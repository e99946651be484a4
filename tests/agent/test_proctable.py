"""The process table re-reads what a new process shows while it settles (a fake /proc)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from oomwatch.agent.sample.notices import Notices
from oomwatch.agent.sample.proctable import RETRY_EMPTY_FOR, ProcessTable
from oomwatch.paths import HostPaths

PID = 4242


def _write(
    proc: Path, *, argv: list[str], cgroup: str, switches: int, hwm_kb: int = 10240, env: bytes = b"PATH=/usr/bin\0"
) -> None:
    d = proc / str(PID)
    d.mkdir(parents=True, exist_ok=True)
    (d / "status").write_text(
        f"Name:\tpython3\nState:\tR (running)\nPid:\t{PID}\nPPid:\t100\nVmHWM:\t  {hwm_kb} kB\n"
        f"VmRSS:\t  10240 kB\nvoluntary_ctxt_switches:\t{switches}\n"
    )
    (d / "stat").write_text(f"{PID} (python3) R 100 {PID} 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5000 0 0\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "environ").write_bytes(env)
    (d / "cgroup").write_text(f"4:memory:{cgroup}\n0::{cgroup}\n")


def test_a_fork_read_before_its_exec_is_read_again_when_it_execs_a_program_of_the_same_name(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    # read between fork and exec: the parent's command line (pytest), in the parent's cgroup
    _write(proc, argv=["python3", "-m", "pytest"], cgroup="/ci", switches=1)
    table = ProcessTable(HostPaths(proc=proc), Notices())
    table.update(0.0)
    assert table.procs[PID].info.argv == ("python3", "-m", "pytest")
    # it exec'd python3 again (same comm) and moved itself into the job's cgroup
    _write(proc, argv=["python3", "train.py", "--epochs", "3"], cgroup="/ci/job", switches=2)
    table.changes.clear()
    table.update(0.5)
    info = table.procs[PID].info
    assert info.argv == ("python3", "train.py", "--epochs", "3")
    assert info.cgroup == "/ci/job"
    assert not table.procs[PID].located  # the sampler finds its memory cgroup again
    assert any(c.argv == ("python3", "train.py", "--epochs", "3") for c in table.changes)


def test_a_settled_process_is_not_read_again(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    _write(proc, argv=["python3", "train.py"], cgroup="/ci/job", switches=1)
    table = ProcessTable(HostPaths(proc=proc), Notices())
    table.update(0.0)
    # past its first seconds, a changed command line with an unchanged name is not looked at again
    _write(proc, argv=["renamed-by-setproctitle"], cgroup="/ci/other", switches=2)
    table.update(RETRY_EMPTY_FOR + 1)
    assert table.procs[PID].info.argv == ("python3", "train.py")
    assert table.procs[PID].info.cgroup == "/ci/job"
    table.close()


def test_an_exec_long_after_the_fork_is_read_again_when_the_peak_rss_falls(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    # a DataLoader worker forked from a 4 GiB trainer: its peak is what it shares with the parent
    _write(proc, argv=["python3", "train.py"], cgroup="/job", switches=1, hwm_kb=4 << 20)
    table = ProcessTable(HostPaths(proc=proc), Notices())
    table.update(0.0)
    # 7 s later, settled, it execs a trainer of its own (python3 again): a new address space
    env = b"PATH=/usr/bin\0RANK=0\0TORCHELASTIC_RUN_ID=realjob\0"
    _write(proc, argv=["python3", "eval.py"], cgroup="/job/eval", switches=2, hwm_kb=30 << 10, env=env)
    table.update(7.0)
    info = table.procs[PID].info
    assert info.argv == ("python3", "eval.py") and info.env.get("TORCHELASTIC_RUN_ID") == "realjob"
    assert info.cgroup == "/job/eval"
    # its peak grows again from there: no exec, nothing read again
    _write(proc, argv=["setproctitle"], cgroup="/job/eval", switches=3, hwm_kb=5 << 20, env=env)
    table.update(7.0 + RETRY_EMPTY_FOR + 1)
    assert table.procs[PID].info.argv == ("python3", "eval.py")
    table.close()


def test_a_real_fork_that_execs_after_it_settled_is_read_again() -> None:
    """Live: a worker forked from a 200 MiB parent execs a new trainer (RANK=0, its own run id) 6 s
    later, past the settling time; the next read of the real /proc names it anew."""
    script = (
        "import os, sys, time\n"
        "ballast = bytearray(200 << 20)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    time.sleep(float(sys.argv[1]))\n"
        "    env = dict(os.environ, RANK='0', TORCHELASTIC_RUN_ID='realjob')\n"
        "    os.execve(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)'], env)\n"
        "print(pid, flush=True)\n"
        "time.sleep(30)\n"
    )
    wait = RETRY_EMPTY_FOR + 1.0
    parent = subprocess.Popen([sys.executable, "-c", script, str(wait)], stdout=subprocess.PIPE, text=True)
    table = ProcessTable(HostPaths(), Notices())
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        start = time.monotonic()
        table.update(time.monotonic())
        assert "TORCHELASTIC_RUN_ID" not in table.procs[child].info.env
        deadline = start + wait + 10
        while time.monotonic() < deadline:
            table.update(time.monotonic())
            if table.procs[child].info.env.get("TORCHELASTIC_RUN_ID") == "realjob":
                break
            time.sleep(0.5)
        info = table.procs[child].info
        assert info.env.get("TORCHELASTIC_RUN_ID") == "realjob" and info.env.get("RANK") == "0", info
        assert time.monotonic() - start > RETRY_EMPTY_FOR  # past the settling time: found by the exec
        assert info.argv[1:3] == ("-c", "import time; time.sleep(30)")
    finally:
        table.close()
        for pid in (child, parent.pid):
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # the processes this test started, by pid
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
