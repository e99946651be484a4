"""The job's stdout/stderr files, read through real processes' /proc/PID/fd links: a large log gives
its start and its end in whole lines, a file shared by several processes is read once, a deleted log
is still read, pipes with no logger behind them are skipped, and a pipe's logger's file is read."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from oomwatch.agent.incidents.joboutput import HEAD, TAIL, job_outputs, locate_outputs

WRITER = """
import sys, time
for i in range(int(sys.argv[1])):
    print(f"line {i:07d} " + "x" * 40)
sys.stdout.flush()
print("ready", file=sys.stderr, flush=True)
time.sleep(60)
"""


def _writer(tmp_path: Path, lines: int, stdout, stderr=subprocess.PIPE) -> subprocess.Popen:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    p = subprocess.Popen([sys.executable, str(script), str(lines)], stdout=stdout, stderr=stderr)
    return p


def _wait_ready(log: Path, lines: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if log.exists() and log.read_bytes().count(b"\n") >= lines:
            return
        time.sleep(0.05)
    raise AssertionError("the writer did not write its lines")


def test_start_and_end_in_whole_lines_once_per_file_and_pipes_skipped(tmp_path: Path):
    log = tmp_path / "train.log"
    n = 12000  # 12000 lines of 54 bytes: 648,000 bytes, more than HEAD + TAIL
    procs = []
    with open(log, "wb") as out:
        procs.append(_writer(tmp_path, n, out, subprocess.STDOUT))  # stdout and stderr: the same file
    _wait_ready(log, n)
    piped = _writer(tmp_path, 10, subprocess.PIPE)  # a pipe: nothing to re-read
    procs.append(piped)
    try:
        found = job_outputs([piped.pid, procs[0].pid, procs[0].pid])
        assert len(found) == 1, found
        o = found[0]
        assert o.path == str(log) and o.pid == procs[0].pid and o.partial
        assert o.size == log.stat().st_size and HEAD + TAIL - 2 * 54 <= len(o.data) <= HEAD + TAIL
        text = o.data.decode()
        assert text.startswith("line 0000000 ")
        assert all(len(line) == 53 and line.startswith("line ") for line in text.splitlines() if line != "ready")
        assert text.rstrip("\n").endswith("ready")
        assert "line 0006000" not in text  # the middle is left out

        log.unlink()  # a deleted log is still read through the descriptor
        (again,) = job_outputs([procs[0].pid])
        assert again.path == f"{log} (deleted)" and again.data == o.data
        assert job_outputs([2**22 + 12345]) == []  # no such process
    finally:
        for p in procs:
            p.kill()
            p.wait()
            for stream in (p.stdout, p.stderr):
                if stream is not None:
                    stream.close()


def test_a_small_file_is_read_whole(tmp_path: Path):
    log = tmp_path / "small.log"
    with open(log, "wb") as out:
        p = _writer(tmp_path, 3, out, subprocess.STDOUT)
    try:
        _wait_ready(log, 4)
        (o,) = job_outputs([p.pid])
        assert not o.partial and o.data == log.read_bytes()
    finally:
        p.kill()
        p.wait()


def test_a_file_located_while_the_job_ran_is_read_after_it_exited(tmp_path: Path):
    """torchrun ends the other ranks and exits within a fraction of a second of a kill: the files
    found while the job ran are read by path, if they are still the same file."""
    log = tmp_path / "train.log"
    with open(log, "wb") as out:
        p = _writer(tmp_path, 3, out, subprocess.STDOUT)
    _wait_ready(log, 4)
    known = locate_outputs([p.pid])
    assert [(f.path, f.pid, f.fd) for f in known] == [(str(log), p.pid, 1)]
    p.kill()
    p.wait()
    assert job_outputs([p.pid]) == []  # nothing to read through: the process is gone
    (o,) = job_outputs([p.pid], known=known)
    assert o.path == str(log) and o.data == log.read_bytes()
    log.rename(tmp_path / "old.log")
    log.write_text("another job's log\n")  # replaced: not this job's output any more
    assert job_outputs([], known=known) == []


def _pipeline(tmp_path: Path, log: Path) -> tuple[subprocess.Popen, int, int]:
    """`python writer.py | tee train.log` as a shell runs it: (the shell, the writer's pid, tee's pid)."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    shell = subprocess.Popen(
        ["bash", "-c", f"{sys.executable} {script} 5 2>/dev/null | tee {log} > /dev/null"],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        kids = [int(c) for c in Path(f"/proc/{shell.pid}/task/{shell.pid}/children").read_text().split()]
        comms = {pid: Path(f"/proc/{pid}/comm").read_text().strip() for pid in kids}
        writer = next((p for p, c in comms.items() if c.startswith("python")), None)
        tee = next((p for p, c in comms.items() if c == "tee"), None)
        if writer and tee and log.exists() and log.read_bytes().count(b"\n") >= 5:
            return shell, writer, tee
        time.sleep(0.05)
    raise AssertionError("the pipeline did not start")


def test_output_behind_a_pipe_is_the_file_its_reader_writes(tmp_path: Path):
    """`python train.py | tee train.log`: the training process writes a pipe; tee, its sibling, reads it
    and writes train.log, which is the job's output. A process that reads no pipe of the job gives none."""
    log = tmp_path / "train.log"
    shell, writer, tee = _pipeline(tmp_path, log)
    try:
        assert locate_outputs([writer]) == []  # no neighbours given: a pipe alone is nothing to re-read
        neighbours = {writer: [shell.pid, writer, tee]}  # its parent and its siblings (itself included)
        (found,) = locate_outputs([writer], neighbours=neighbours)
        assert (found.path, found.pid) == (str(log), tee)
        (o,) = job_outputs([writer], neighbours=neighbours)
        assert o.data.startswith(b"line 0000000 ") and o.data.count(b"\n") == 5
        assert locate_outputs([writer], neighbours={writer: [shell.pid]}) == []  # the shell reads no pipe of it
    finally:
        shell.kill()
        for pid in (writer, tee):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shell.wait()
