"""``oomwatch run -- CMD...``: run a command, sample its whole process tree often, pass its exit code
through, and when it fails say why, from the samples, its output and the kernel's reports for its pids.

- The command's stdout/stderr are passed through unchanged and a copy is kept (the first 1 MiB and
  the last 16 MiB of each): "DataLoader worker (pid N) is killed by signal" lines are evidence.
  Where our own stream is a terminal, the command's is one too (a pseudo-terminal of its own size), so
  the command behaves as it would unwrapped: progress bars that draw only on a terminal (Lightning's
  rich bar) draw as it goes, and Python's print reaches us line by line, not 8 KiB at a time; where it
  is a file or a pipe, the command's is a pipe. ``terminal`` True or False says so for both streams.
- Besides every ``interval``, the tree is sampled at each of the command's first training steps, as its step
  counter prints them (agent/first_steps.py): a loop stepping faster than the ticks is still seen once warm.
- ``/dev/kmsg`` is read from the start of the run when it is readable (root, or CAP_SYSLOG where
  ``kernel.dmesg_restrict=1``); only the OOM reports that kill one of the command's processes are used.
- Every process ever seen in the tree is remembered with its role, first/last/peak RSS, anon, USS,
  PSS and swap; the roles seen live beat any guess from names in the diagnosis.
- The script the command runs (named by its launcher's or first rank's command line while it
  runs, else by the command itself) and the modules it imports from its folder are read, not run,
  for the calls behind each mechanism (``--no-code`` turns this off).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from oomwatch.agent.analyze.job import analyze, programs
from oomwatch.agent.first_steps import FirstSteps
from oomwatch.agent.peaks import PeakWatch
from oomwatch.agent.recorder import Recorder, RunResult
from oomwatch.agent.sample.jobcode import CodeRef, locate_code
from oomwatch.agent.sample.jobcode import read_code as read_code_of
from oomwatch.agent.sample.sampler import Sampler
from oomwatch.agent.watch.spans import kill_reports
from oomwatch.engine.api import Engine
from oomwatch.engine.diagnosis import Diagnosis
from oomwatch.engine.model import Program
from oomwatch.engine.progress import Progress, lines_of, progress
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.rules.ruleset import RuleSet
from oomwatch.paths import HostPaths
from oomwatch.procfs import ProcessGone
from oomwatch.procfs.kmsg import KmsgReader, KmsgRecord
from oomwatch.procfs.stat import read_stat
from oomwatch.redact import redact_argv
from oomwatch.scripts import read_program

HEAD_BYTES = 1 << 20
TAIL_BYTES = 16 << 20
KMSG_KEEP = 100_000  # records kept while the command runs (kernel reports are ~60 records each)
MARKS_KEEP = 4096  # when each piece of output came (a step counter's rate): halved, evenly, when full


class Capture:
    """Pass a stream through and keep its head and tail, and when its pieces came."""

    def __init__(
        self, source: IO[bytes], sink: IO[bytes], on_chunk: Callable[[bytes, float], None] | None = None
    ) -> None:
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.dropped = 0
        self.written = 0
        self.marks: list[tuple[int, float]] = []  # (bytes written by then, wall-clock time)
        self._source, self._sink = source, sink
        self._on_chunk = on_chunk  # each chunk as it came, after it was passed through (first_steps)
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        read = getattr(self._source, "read1", self._source.read)
        while True:
            try:
                chunk = read(65536)
            except OSError as exc:  # a pseudo-terminal's end once every process holding it has exited
                if exc.errno != errno.EIO:
                    raise
                chunk = b""
            if not chunk:
                break
            with contextlib.suppress(OSError, ValueError):  # our own stdout closed: keep capturing
                self._sink.write(chunk)
                self._sink.flush()
            self._keep(chunk)
            if self._on_chunk is not None:
                self._on_chunk(chunk, self.marks[-1][1])
        self._source.close()  # at its end: the pipe is the capture's to close

    def _keep(self, chunk: bytes) -> None:
        self.written += len(chunk)
        self.marks.append((self.written, time.time()))
        if len(self.marks) > MARKS_KEEP:
            self.marks = [*self.marks[:-1:2], self.marks[-1]]
        room = HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size - len(self.tail[0]) >= TAIL_BYTES:
            self.tail_size -= len(self.tail[0])
            self.dropped += len(self.tail.popleft())

    def text(self) -> bytes:
        gap = b"\n" if self.dropped else b""
        return bytes(self.head) + gap + b"".join(self.tail)

    def timed_lines(self) -> list[tuple[float, str]]:
        """The lines kept that may hold a step counter, each with when it came."""
        head = lines_of(bytes(self.head), self.marks)
        if not self.tail:
            return head
        skipped = len(self.head) + self.dropped  # the tail's first byte, in the bytes written
        tail = [(n - skipped, t) for n, t in self.marks if n > skipped]
        return [*head, *lines_of(b"".join(self.tail), tail)]


def run_command(
    argv: Sequence[str],
    *,
    interval: float = 0.2,
    pss_budget: float = 0.2,
    capture: bool = True,
    paths: HostPaths | None = None,
    stdout: IO[bytes] | None = None,
    stderr: IO[bytes] | None = None,
    read_code: bool = True,
    stop_after: float | None = None,
    terminal: bool | None = None,
) -> RunResult:
    """Run ``argv``, sample its tree every ``interval`` until it exits (or, with ``stop_after``, until that many
    seconds passed: then its processes are sent SIGTERM, and SIGKILL 10 s later), and diagnose it if it failed.
    ``terminal``: whether its captured stdout and stderr are pseudo-terminals (None: each where the stream it
    is passed through to is a terminal)."""
    paths = paths or HostPaths()
    notes: list[str] = []
    kmsg = _open_kmsg(paths, notes)
    records: deque[KmsgRecord] = deque(maxlen=KMSG_KEEP)
    # the rules before the command starts (0.2 s): for its step counter at the first steps, and the diagnosis.
    # Not in a thread beside the first ticks: it holds the interpreter while they read the processes, then the
    # cgroup, as the job starts (with it there, a probe test read its job's start inconsistently 2 times in 14)
    rules = load_rules(()) if capture else None
    started = time.monotonic()
    wake = threading.Event()  # the command exited, or printed one of its first steps: sample now
    step_rules = rules.steps if rules is not None else None
    first = FirstSteps(lambda: step_rules, wake)
    proc, captures = _start(argv, capture, kmsg, stdout, stderr, terminal, (first.feeder(), first.feeder()))
    threading.Thread(target=_exited, args=(proc, wake), daemon=True).start()
    forwarded = _forward_signals(proc)
    sampler = Sampler(paths, pss_budget=pss_budget, top_n=0, subtree=proc.pid)
    recorder = Recorder()
    peaks = PeakWatch(paths).start()
    try:
        deadline = started + stop_after if stop_after is not None else None
        code = _sample_until_exit(
            proc, sampler, recorder, kmsg, records, interval, wake, paths.proc if read_code else None, deadline, peaks
        )
        if proc.returncode is None:  # the probe's time is up
            _stop_tree(proc, recorder, paths)
            notes.append(f"stopped after {stop_after:g} s, as asked (a probe): the run did not end by itself")
        returncode = proc.returncode
        # the kernel's report is written before the victim's parent sees it die; give it a moment
        time.sleep(0.05)
        recorder.add(sampler.tick(), peaks.take())
        if kmsg is not None:
            records.extend(kmsg.read_available())
            if kmsg.lost:
                notes.append(f"{kmsg.lost} kernel log record(s) were overwritten before they could be read")
    finally:
        peaks.close()
        sampler.close()
        if kmsg is not None:
            kmsg.close()
        _restore_signals(forwarded)
    for c in captures:
        c.thread.join(timeout=5)
    kills = [(pid, report) for pid, report in kill_reports(list(records)) if pid in recorder.seen]
    kernel = [rec for _, report in kills for rec in report]
    kernel_lines = [r.dmesg_line() for r in kernel]
    failed = returncode != 0 or bool(kernel)
    victim = kills[0][0] if kills else None
    program = (read_code_of(code) or _command_code(argv)) if read_code else None
    ruleset = (rules if rules is not None else load_rules(())) if failed or captures else None
    printed = sorted((line for c in captures for line in c.timed_lines()), key=lambda tl: tl[0])
    steps = progress(printed, ruleset.steps) if printed and ruleset is not None else None
    diagnosis = _diagnose(argv, captures, kernel_lines, recorder, victim, program, ruleset, steps) if failed else None
    return RunResult(returncode, diagnosis, recorder, kernel_lines, notes, time.monotonic() - started, steps)


def _exited(proc: subprocess.Popen[bytes], wake: threading.Event) -> None:
    """Wait for the command in a thread of its own, and wake the sampler when it exits."""
    proc.wait()
    wake.set()


def _open_kmsg(paths: HostPaths, notes: list[str]) -> KmsgReader | None:
    """/dev/kmsg from now on; where it cannot be read, a note saying why (and None, if it cannot be opened)."""
    kmsg: KmsgReader | None = None
    try:
        kmsg = KmsgReader(paths.kmsg)
        kmsg.seek_end()
    except OSError as exc:
        notes.append(
            f"cannot read {paths.kmsg} ({exc.strerror or exc}): the kernel's OOM reports are not included "
            "(run as root, or with CAP_SYSLOG where kernel.dmesg_restrict=1)"
        )
    return kmsg


def _start(
    argv: Sequence[str],
    capture: bool,
    kmsg: KmsgReader | None,
    stdout: IO[bytes] | None,
    stderr: IO[bytes] | None,
    terminal: bool | None = None,
    feeders: tuple[Callable[[bytes, float], None] | None, Callable[[bytes, float], None] | None] = (None, None),
) -> tuple[subprocess.Popen[bytes], list[Capture]]:
    """The command started, and its output passed through and kept (when ``capture``), each stream's chunks
    also fed to its of ``feeders``."""
    sinks = (stdout or sys.stdout.buffer, stderr or sys.stderr.buffer)
    ends: list[tuple[int, int] | None] = [None, None]  # (ours, the command's) of each pseudo-terminal
    if capture:
        ends = [_terminal(sink) if (terminal if terminal is not None else _isatty(sink)) else None for sink in sinks]
    pipe = subprocess.PIPE if capture else None
    outs = [end[1] if end is not None else pipe for end in ends]
    try:
        proc = subprocess.Popen(list(argv), stdout=outs[0], stderr=outs[1])
    except OSError as exc:
        for end in ends:
            if end is not None:
                os.close(end[0])
        if kmsg is not None:
            kmsg.close()
        raise FileNotFoundError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    finally:
        for end in ends:
            if end is not None:
                os.close(end[1])  # the command holds its end: ours reads EOF (EIO) once it and its children exit
    captures = []
    if capture:
        sources = [os.fdopen(end[0], "rb", buffering=0) if end is not None else piped
                   for end, piped in zip(ends, (proc.stdout, proc.stderr), strict=True)]  # fmt: skip
        assert sources[0] is not None and sources[1] is not None
        captures = [Capture(sources[0], sinks[0], feeders[0]), Capture(sources[1], sinks[1], feeders[1])]
    return proc, captures


def _isatty(stream: IO[bytes]) -> bool:
    try:
        return stream.isatty()
    except (OSError, ValueError):  # closed
        return False


def _terminal(sink: IO[bytes]) -> tuple[int, int]:
    """A pseudo-terminal for one of the command's streams: (our end, its end). Its size is the size of the
    terminal ``sink`` writes to (80x24 when that is no terminal); it passes bytes through as written (no
    newline made CR LF: the terminal we pass them to does that itself)."""
    ours, theirs = pty.openpty()
    attrs = termios.tcgetattr(theirs)
    attrs[1] &= ~termios.OPOST
    termios.tcsetattr(theirs, termios.TCSANOW, attrs)
    size = struct.pack("HHHH", 24, 80, 0, 0)
    with contextlib.suppress(OSError, ValueError, AttributeError):
        size = fcntl.ioctl(sink.fileno(), termios.TIOCGWINSZ, size)
    with contextlib.suppress(OSError):
        fcntl.ioctl(theirs, termios.TIOCSWINSZ, size)
    return ours, theirs


def _sample_until_exit(
    proc: subprocess.Popen[bytes],
    sampler: Sampler,
    recorder: Recorder,
    kmsg: KmsgReader | None,
    records: deque[KmsgRecord],
    interval: float,
    wake: threading.Event,
    code_in: Path | None,
    deadline: float | None = None,
    peaks: PeakWatch | None = None,
) -> CodeRef | None:
    """Sample the command's tree every ``interval``, and at once when ``wake`` is set (the command printed one
    of its first steps, or exited), until it exits (or the monotonic ``deadline`` passes), reading the kernel
    log as it goes; the code it runs is located under ``code_in`` (the host's /proc; None: not read).
    ``peaks``: what it read between the ticks goes with each tick, and it is told what to watch."""
    code: CodeRef | None = None
    while True:
        tick = sampler.tick()
        recorder.add(tick, peaks.take() if peaks is not None else None)
        if peaks is not None:
            peaks.watch([p.pid for p in tick.processes], sampler.memory_dirs)
        if code_in is not None and code is None:  # the script, from the first launcher or rank that names one
            code = locate_code([p.pid for p in tick.processes if p.role in ("launcher", "rank")], code_in)
        if kmsg is not None:
            records.extend(kmsg.read_available())
        if proc.returncode is None:
            wake.wait(timeout=interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))
            wake.clear()
        if proc.returncode is not None or (deadline is not None and time.monotonic() >= deadline):
            return code


def _stop_tree(proc: subprocess.Popen[bytes], recorder: Recorder, paths: HostPaths, grace: float = 10.0) -> None:
    """SIGTERM to the command and every process of its tree (all started by it), and SIGKILL to those still
    running ``grace`` seconds later. A process is signalled only while it is the one seen (its start time)."""
    started = {proc.pid: _start_time(paths, proc.pid)}
    for p in recorder.last_tick.processes if recorder.last_tick else ():
        started.setdefault(p.pid, _start_time(paths, p.pid))
    mine = {pid: at for pid, at in started.items() if at is not None}
    for pid in mine:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not any(_start_time(paths, pid) == at for pid, at in mine.items()):
            return
        time.sleep(0.1)
    for pid, at in mine.items():
        if _start_time(paths, pid) == at:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    proc.wait()


def _start_time(paths: HostPaths, pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot), while it runs; None when it is gone or a zombie."""
    try:
        stat = read_stat(paths, pid)
    except (ProcessGone, OSError, ValueError):
        return None
    return stat.starttime if stat.state not in (None, "Z", "X") else None


def _command_code(argv: Sequence[str]) -> Program | None:
    """The script the command line itself names, when no process of it was seen naming one."""
    program = read_program(argv, Path.cwd())
    return program if program.files else None


def _diagnose(
    argv: Sequence[str],
    captures: list[Capture],
    kernel: list[str],
    rec: Recorder,
    victim: int | None,
    program: Program | None,
    rules: RuleSet | None = None,
    steps: Progress | None = None,
) -> Diagnosis:
    engine = Engine(rules if rules is not None else load_rules(()))
    scans = []
    shown = redact_argv(argv)[:3]  # the inputs' names are shown: no secret in them
    name = " ".join(Path(a).name if i < 2 else a for i, a in enumerate(shown))[:40]
    for label, cap in zip(("stdout", "stderr"), captures, strict=False):
        scans.append(engine.scan(f"{name} ({label})", cap.text()))
    if kernel:
        scans.append(engine.scan("kernel log (/dev/kmsg)", "\n".join(kernel).encode() + b"\n"))
    live = analyze(rec.rows(), victim, node=rec.node)
    live = dataclasses.replace(
        live, programs=programs(rec.peaks(alive_with=victim)), progress=steps.points if steps is not None else ()
    )
    # oomwatch itself shares the job's memory limit when it runs inside the job's container: in the
    # kernel's task table it is no rank of the job (a Python process of the job's tree the agent does
    # not place either: unknown)
    known = {**rec.roles(), os.getpid(): ("unknown", None)}
    return engine.diagnose(scans, known=known, live=live, program=program)


def _forward_signals(proc: subprocess.Popen[bytes]) -> dict[int, Any]:
    """SIGTERM / SIGHUP to us go to the command too (Ctrl-C reaches it through the terminal)."""

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    old: dict[int, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        old[sig] = signal.getsignal(sig)
        signal.signal(sig, forward if sig != signal.SIGINT else _ignore)
    return old


def _ignore(_signum: int, _frame: object) -> None:
    """Ctrl-C: the command gets it from the terminal; we stay to report how it ended."""


def _restore_signals(old: dict[int, Any]) -> None:
    for sig, handler in old.items():
        signal.signal(sig, handler)
