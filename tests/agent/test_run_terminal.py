"""`oomwatch run` keeps a terminal a terminal: where its own stdout is one, the command's is one too (a
pseudo-terminal), so the command behaves as it would unwrapped; --tty gives it one when writing to a file (its
step counter then reads bars that draw only on a terminal, and lines Python would hold in an 8 KiB buffer
arrive as they are printed); --no-tty gives it pipes."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, run_oomwatch

SAYS = "import sys; print(sys.stdout.isatty(), sys.stderr.isatty(), flush=True)"

# A training loop that prints its steps with print() and no flush: to a pipe Python keeps them in its buffer
# and they all come out at the exit; to a terminal each line comes as it is printed
STEPS = """
import time
for step in range(16):
    time.sleep(0.1)
    print(f"step {step} loss {2.0 - step / 10:.2f}")
"""

# A bar that draws itself only on a terminal, as rich's does: coloured frames redrawn in place; to a file
# only its last frame, at the end
BAR = r"""
import sys, time
out = sys.stdout
frame = "\x1b[2KEpoch 0/1 \x1b[35m" + "\u2501" * 12 + "\x1b[0m {n}/20 \x1b[2m0:00:0{s} \u2022 0:00:01\x1b[0m"
if out.isatty():
    out.write("\x1b[?25l")
    for n in range(21):
        time.sleep(0.06)
        out.write("\r" + frame.format(n=n, s=n // 10))
        out.flush()
    out.write("\n")
else:
    time.sleep(1.3)
    out.write(frame.format(n=20, s=2).replace("\x1b[2K", "") + "\n")
"""


def _on_a_terminal(*args: str) -> tuple[int, bytes]:
    """Run oomwatch with a pseudo-terminal as its stdout (stderr a pipe); its exit code and what it wrote there."""
    ours, theirs = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "oomwatch", *args], stdout=theirs, stderr=subprocess.PIPE,
                            cwd=ROOT, env=env)  # fmt: skip
    os.close(theirs)
    got = b""
    while True:
        try:
            chunk = os.read(ours, 65536)
        except OSError:  # EIO: every holder of the terminal's other end has exited
            break
        if not chunk:
            break
        got += chunk
    os.close(ours)
    proc.communicate(timeout=60)
    return proc.returncode, got


def test_on_a_terminal_the_command_writes_to_a_terminal():
    code, got = _on_a_terminal("run", "-q", "--", sys.executable, "-c", SAYS)
    assert code == 0
    assert got.replace(b"\r\n", b"\n") == b"True False\n"  # its stdout a terminal as ours; its stderr a pipe


def test_no_tty_gives_it_pipes_even_on_a_terminal():
    code, got = _on_a_terminal("run", "-q", "--no-tty", "--", sys.executable, "-c", SAYS)
    assert code == 0 and got.replace(b"\r\n", b"\n") == b"False False\n"


def test_written_to_a_file_it_writes_to_a_pipe_unless_asked():
    assert run_oomwatch("run", "-q", "--", sys.executable, "-c", SAYS).stdout == b"False False\n"
    done = run_oomwatch("run", "-q", "--tty", "--", sys.executable, "-c", SAYS)
    assert done.returncode == 0 and done.stdout == b"True True\n"  # bytes as written: no newline made CR LF


def _steps(tmp_path: Path, *args: str) -> dict:
    report = tmp_path / "r.json"
    done = run_oomwatch("run", "-q", "--report", str(report), *args)
    assert done.returncode == 0, done.stderr
    return json.loads(report.read_text())["progress"] or {}


def test_with_a_terminal_unflushed_step_lines_are_timed_as_they_are_printed(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)  # Python's own buffering, as most jobs have it
    piped = _steps(tmp_path, "--", sys.executable, "-c", STEPS)
    assert piped["steps_per_second"] is None  # all 16 lines came at once, at the exit: no rate
    timed = _steps(tmp_path, "--tty", "--", sys.executable, "-c", STEPS)
    assert timed["rule"] == "step_word" and [n for _, n in timed["points"]][-1] == 15
    assert 5 < timed["steps_per_second"] < 11  # one step each 0.1 s, and Python's start


def test_with_a_terminal_a_bar_that_draws_only_there_counts_each_step(tmp_path: Path):
    piped = _steps(tmp_path, "--", sys.executable, "-c", BAR)
    assert [n for _, n in piped["points"]] == [20]  # its last frame only
    drawn = _steps(tmp_path, "--tty", "--", sys.executable, "-c", BAR)
    assert drawn["rule"] == "rich_bar" and drawn["total"] == 20
    assert [n for _, n in drawn["points"]] == list(range(21)) and drawn["steps_per_second"] > 5


def test_estimate_takes_tty_with_a_probe_only():
    done = run_oomwatch("estimate", "--tty", "--report", "x.json")
    assert done.returncode == 2 and b"--tty goes with --probe" in done.stderr


def test_a_probe_given_a_terminal_times_the_steps_of_a_bar_drawn_only_there():
    command = ("--", sys.executable, "-c", BAR)
    piped = json.loads(run_oomwatch("estimate", "--probe", "10s", "--format", "json", *command).stdout)
    drawn = json.loads(run_oomwatch("estimate", "--probe", "10s", "--tty", "--format", "json", *command).stdout)
    assert piped["measured"]["steps"] is None  # one frame, at the end: not a rate
    steps = drawn["measured"]["steps"]
    assert steps is not None and steps["last"] == 20, steps
