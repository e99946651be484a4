"""The job's stdout/stderr files, read through real processes' /proc/PID/fd links: a large log gives
its start and its end in whole lines, a file shared by several processes is read once, a deleted log
is still read, and pipes are skipped."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from oomwatch.agent.joboutput import HEAD, TAIL, job_outputs, locate_outputs

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
