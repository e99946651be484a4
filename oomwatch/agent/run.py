"""``oomwatch run -- CMD...``: run a command, sample its whole process tree often, pass its exit code
through, and when it fails say why, from the samples, its output and the kernel's reports for its pids.

- The command's stdout/stderr are passed through unchanged and a copy is kept (the first 1 MiB and
  the last 16 MiB of each): "DataLoader worker (pid N) is killed by signal" lines are evidence.
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
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from oomwatch.agent.analyze.job import analyze, programs
from oomwatch.agent.model import ProcessSample, Tick
from oomwatch.agent.sample.jobcode import CodeRef, locate_code
from oomwatch.agent.sample.jobcode import read_code as read_code_of
from oomwatch.agent.sample.sampler import Sampler
from oomwatch.engine.api import Engine
from oomwatch.engine.diagnosis import Diagnosis
from oomwatch.engine.model import Program
from oomwatch.engine.rules.loader import load_rules
from oomwatch.engine.sizes import human
from oomwatch.kmsg import KmsgReader, KmsgRecord, kill_reports
from oomwatch.paths import HostPaths
from oomwatch.redact import redact_argv
from oomwatch.render.layout import NOT_A_TERMINAL, table, wrap
from oomwatch.scripts import read_program
from oomwatch.textsafe import escape_controls

HEAD_BYTES = 1 << 20
TAIL_BYTES = 16 << 20
KMSG_KEEP = 100_000  # records kept while the command runs (kernel reports are ~60 records each)
NODE_POINTS = 3000  # node samples kept for the swap/pressure analyzer: 10 minutes at the default 0.2 s


class Capture:
    """Pass a stream through and keep its head and tail."""

    def __init__(self, source: IO[bytes], sink: IO[bytes]) -> None:
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.dropped = 0
        self._source, self._sink = source, sink
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        read = getattr(self._source, "read1", self._source.read)
        while True:
            chunk = read(65536)
            if not chunk:
                break
            with contextlib.suppress(OSError, ValueError):  # our own stdout closed: keep capturing
                self._sink.write(chunk)
                self._sink.flush()
            self._keep(chunk)

    def _keep(self, chunk: bytes) -> None:
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


_Point = tuple[float, int | None, int | None, int | None, int | None]  # (time, rss, anon, uss, rchar)


@dataclass
class Seen:
    """What the run saw of one process."""

    first: ProcessSample
    last: ProcessSample
    first_time: float
    last_time: float
    peak: dict[str, int] = field(default_factory=dict)
    first_uss: int | None = None
    gone: bool = False
    # the first sample and the recent ones, for the analyzers (what grew, how steadily)
    points: deque[_Point] = field(default_factory=lambda: deque(maxlen=600))
    first_point: _Point | None = None

    def update(self, p: ProcessSample, t: float) -> None:
        self.last, self.last_time = p, t
        point = (t, p.rss, p.anon, p.uss, p.rchar)
        if self.first_point is None:
            self.first_point = point
        self.points.append(point)
        if self.first_uss is None and p.uss is not None:
            self.first_uss = p.uss
        for attr in ("rss", "anon", "uss", "pss", "swap"):
            v = getattr(p, attr)
            if v is not None and v > self.peak.get(attr, -1):
                self.peak[attr] = v


class Recorder:
    def __init__(self) -> None:
        self.seen: dict[int, Seen] = {}
        self.last_tick: Tick | None = None
        self.peak_gpu: tuple[int, int] | None = None  # (used, total) at the highest use
        # swap and pressure of the node, each tick, the last NODE_POINTS (the analyzers' input)
        self.node: deque[dict[str, Any]] = deque(maxlen=NODE_POINTS)

    def add(self, tick: Tick) -> None:
        alive = set()
        for p in tick.processes:
            alive.add(p.pid)
            s = self.seen.get(p.pid)
            if s is None or s.gone:
                s = self.seen[p.pid] = Seen(p, p, tick.time, tick.time)
            s.update(p, tick.time)
        for pid, s in self.seen.items():
            if pid not in alive:
                s.gone = True
        for g in tick.gpus:
            if g.used is not None and g.total and (self.peak_gpu is None or g.used > self.peak_gpu[0]):
                self.peak_gpu = (g.used, g.total)
        n = tick.node
        if n is not None:
            psi = n.pressure
            self.node.append({
                "time": tick.time, "resolution": tick.time - self.node[-1]["time"] if self.node else None,
                "swap_total": n.swap_total, "swap_free": n.swap_free,
                "pressure_some": psi.some.avg10 if psi is not None and psi.some is not None else None,
                "pressure_full": psi.full.avg10 if psi is not None and psi.full is not None else None,
            })  # fmt: skip
        self.last_tick = tick

    def peaks(self, alive_with: int | None = None) -> list[dict[str, Any]]:
        """Each process seen (still there in the last second ``alive_with`` was seen, when given),
        with its largest anonymous memory: what separate programs held when it was killed."""
        mine = self.seen.get(alive_with) if alive_with is not None else None
        since = mine.last_time - 1.0 if mine is not None else float("-inf")
        # its first parent: a worker that outlives its rank by a moment is re-parented
        return [{"pid": pid, "ppid": s.first.ppid, "comm": s.last.comm, "anon": s.peak.get("anon")}
                for pid, s in self.seen.items() if s.last_time >= since]  # fmt: skip

    def roles(self) -> dict[int, tuple[str, int | None]]:
        return {pid: (s.last.role, s.last.rank) for pid, s in self.seen.items()}

    def rows(self) -> list[dict[str, Any]]:
        """The samples as history rows (the analyzers' input)."""
        out = []
        for pid, s in self.seen.items():
            points = list(s.points)
            if s.first_point is not None and (not points or points[0] != s.first_point):
                points.insert(0, s.first_point)
            for t, rss, anon, uss, rchar in points:
                out.append({"time": t, "pid": pid, "role": s.last.role, "rank": s.last.rank, "comm": s.last.comm,
                            "rss": rss, "anon": anon, "uss": uss, "rchar": rchar})  # fmt: skip
        return out


@dataclass
class RunResult:
    returncode: int
    diagnosis: Diagnosis | None
    recorder: Recorder
    kernel_lines: list[str]
    notes: list[str]
    duration: float


def exit_status(returncode: int) -> int:
    """A shell's convention: killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


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
) -> RunResult:
    paths = paths or HostPaths()
    notes: list[str] = []
    kmsg: KmsgReader | None = None
    try:
        kmsg = KmsgReader(paths.kmsg)
        kmsg.seek_end()
    except OSError as exc:
        notes.append(
            f"cannot read {paths.kmsg} ({exc.strerror or exc}): the kernel's OOM reports are not included "
            "(run as root, or with CAP_SYSLOG where kernel.dmesg_restrict=1)"
        )
    records: deque[KmsgRecord] = deque(maxlen=KMSG_KEEP)
    started = time.monotonic()
    pipe = subprocess.PIPE if capture else None
    try:
        proc = subprocess.Popen(list(argv), stdout=pipe, stderr=pipe)
    except OSError as exc:
        if kmsg is not None:
            kmsg.close()
        raise FileNotFoundError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    captures = []
    if capture:
        assert proc.stdout is not None and proc.stderr is not None
        captures = [
            Capture(proc.stdout, stdout or sys.stdout.buffer),
            Capture(proc.stderr, stderr or sys.stderr.buffer),
        ]
    forwarded = _forward_signals(proc)
    sampler = Sampler(paths, pss_budget=pss_budget, top_n=0, subtree=proc.pid)
    recorder = Recorder()
    code: CodeRef | None = None
    try:
        while True:
            tick = sampler.tick()
            recorder.add(tick)
            if read_code and code is None:  # the script, from the first launcher or rank that names one
                code = locate_code([p.pid for p in tick.processes if p.role in ("launcher", "rank")], paths.proc)
            if kmsg is not None:
                records.extend(kmsg.read_available())
            try:
                proc.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                continue
        returncode = proc.returncode
        # the kernel's report is written before the victim's parent sees it die; give it a moment
        time.sleep(0.05)
        recorder.add(sampler.tick())
        if kmsg is not None:
            records.extend(kmsg.read_available())
            if kmsg.lost:
                notes.append(f"{kmsg.lost} kernel log record(s) were overwritten before they could be read")
    finally:
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
    diagnosis = _diagnose(argv, captures, kernel_lines, recorder, victim, program) if failed else None
    return RunResult(returncode, diagnosis, recorder, kernel_lines, notes, time.monotonic() - started)


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
) -> Diagnosis:
    engine = Engine(load_rules(()))
    scans = []
    shown = redact_argv(argv)[:3]  # the inputs' names are shown: no secret in them
    name = " ".join(Path(a).name if i < 2 else a for i, a in enumerate(shown))[:40]
    for label, cap in zip(("stdout", "stderr"), captures, strict=False):
        scans.append(engine.scan(f"{name} ({label})", cap.text()))
    if kernel:
        scans.append(engine.scan("kernel log (/dev/kmsg)", "\n".join(kernel).encode() + b"\n"))
    live = analyze(rec.rows(), victim, node=rec.node)
    live = dataclasses.replace(live, programs=programs(rec.peaks(alive_with=victim)))
    return engine.diagnose(scans, known=rec.roles(), live=live, program=program)


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


SAMPLES_HEADER = ("PID", "ROLE", "RANK", "COMM", "RSS", "ANON", "USS", "USS GROWTH", "END")


def render_samples(rec: Recorder, interval: float, width: int = NOT_A_TERMINAL) -> str:
    """The processes of the run, parents first, with what the samples saw, in ``width`` columns."""
    if not rec.seen:
        return ""
    title = f"Memory of the command's processes, each at its peak (sampled every {interval:g}s by oomwatch run):"
    lines = wrap(title, width)
    order = sorted(rec.seen.values(), key=lambda s: (s.first_time, s.first.pid))
    rows = []
    for s in order[:60]:
        p = s.last
        growth = "-"
        if s.first_uss is not None and p.uss is not None:
            growth = ("+" if p.uss >= s.first_uss else "-") + human(abs(p.uss - s.first_uss))
        rows.append([str(p.pid), p.role, "-" if p.rank is None else str(p.rank), escape_controls(p.comm),
                     human(s.peak.get("rss")), human(s.peak.get("anon")), human(s.peak.get("uss")), growth,
                     "gone" if s.gone else "alive"])  # fmt: skip
    lines.extend(table(SAMPLES_HEADER, rows, width, right=(0, 2, 4, 5, 6, 7)))
    if len(order) > 60:
        lines.append(f"  ... and {len(order) - 60} more")
    tick = rec.last_tick
    if rec.peak_gpu is not None:
        used, total = rec.peak_gpu
        lines.append(f"GPU memory at its highest: {human(used)} of {human(total)} ({used / total:.0%}).")
    elif tick is not None and not tick.gpus:
        lines.append("GPU memory: not sampled (no NVML on this host).")
    return "\n".join(lines) + "\n"
