"""The process table re-reads what a new process shows while it settles (a fake /proc)."""

from __future__ import annotations

from pathlib import Path

from oomwatch.agent.notices import Notices
from oomwatch.agent.proctable import RETRY_EMPTY_FOR, ProcessTable
from oomwatch.paths import HostPaths

PID = 4242


def _write(proc: Path, *, argv: list[str], cgroup: str, switches: int) -> None:
    d = proc / str(PID)
    d.mkdir(parents=True, exist_ok=True)
    (d / "status").write_text(
        f"Name:\tpython3\nState:\tR (running)\nPid:\t{PID}\nPPid:\t100\nVmRSS:\t  10240 kB\n"
        f"voluntary_ctxt_switches:\t{switches}\n"
    )
    (d / "stat").write_text(f"{PID} (python3) R 100 {PID} 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5000 0 0\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "environ").write_bytes(b"PATH=/usr/bin\0")
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
