"""A job's step counter, read from its output files as they grow: each tick, what each file located for a job
(agent.incidents.joboutput: its stdout/stderr, or the log its pipe's reader writes) gained since the last tick
is read, its lines are read by the step rules (rules/activities.yaml ``steps``: a progress bar, "step N loss"),
and each counter's latest reading becomes a ``StepMark`` at the tick's time, for the history: what
``oomwatch estimate --job`` times the steps by (engine.progress assembles them as it does a run's output).

Honest about time: a line is dated by the tick that found it, so a job whose output is block-buffered (Python's
print to a file: 8 KiB at a time) shows its steps in lumps; a file first seen is read from its end on (what it
held already is not dated now); a line not ended yet waits for its end (a cut "step 12" of "step 1234" would
read as a new epoch). A file that shrank (truncated, rewritten) is read again from its start.

The files are read in a thread of their own (``InThread``): a log on a file system that hangs (a lost NFS
server) holds that thread, never the sampler's ticks.

A job's first training steps bring samples of their own, as ``oomwatch run``'s do (agent.first_steps: what a loop
holds once warm is where a bounded cache's fix leaves it, and a loop stepping 80 times a second has a dozen steps
between two ticks of 0.2 s, 80 between ticks of a second). Until a job's first counter has risen WARM_STEPS past
its first reading, the thread reads that job's files every POLL seconds (every WAITING_POLL before that first
reading: loading the data may take minutes), dates what it finds then, and calls ``on_step`` at each of those
steps (the agent takes a tick then). A job is read so at most FIRST_SECONDS from when
its files were located (one that never prints a counter: an inference server); a step read again (every rank
printing it) brings none. Output a job writes block-buffered (Python's print to a file) comes in lumps: its first
steps may come together, in one sample.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from oomwatch.agent.first_steps import Window
from oomwatch.agent.incidents.joboutput import OutputFile
from oomwatch.agent.tick import StepMark
from oomwatch.engine.progress import Count, counts
from oomwatch.engine.rules.activity_rules import StepRule

log = logging.getLogger("oomwatch.agent")

READ_MAX = 256 << 10  # bytes of a file read in one tick at most; past it, its end (the counter's latest)
PARTIAL_MAX = 8 << 10  # a line not ended yet is kept at most this long (a bar redrawn with \r ends each time)
LINES_MAX = 2000  # lines of a file read by the step rules in one tick at most: its latest
POLL = 0.02  # seconds between reads of a job's files over its first steps
WAITING_POLL = 0.05  # seconds between reads of a job's files before its first counter line (16 files: 0.5% of a CPU)
FIRST_SECONDS = 1800.0  # a job's files are read so this long at most after they were located (its data loading)

_ENDED = re.compile(rb"[^\r\n]*[\r\n]")


@dataclass
class _Tail:
    offset: int
    partial: bytes = b""


@dataclass
class _First:
    """A job over its first steps: when its files were located, which of its readings bring a sample."""

    located: float
    window: Window


class StepWatch:
    """The step counters of the jobs' output files. ``rules``: the step rules once loaded (None until then:
    the agent loads its engine in a thread of its own); ``proc``: where /proc is; ``clock``: the seconds
    FIRST_SECONDS is counted in."""

    def __init__(
        self,
        rules: Callable[[], Sequence[StepRule] | None],
        proc: Path = Path("/proc"),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rules = rules
        self.proc = proc
        self.clock = clock
        self.wanted = 0  # reads of a job's files that wanted a sample (its first steps), since the start
        self._tails: dict[tuple[int, int], _Tail] = {}  # (dev, ino) -> how far it was read
        self._located: Mapping[str, Sequence[OutputFile]] = {}  # the jobs' files as last offered
        self._first: dict[str, _First] = {}  # the jobs located, with their first steps' windows

    def read(self, now: float, located: Mapping[str, Sequence[OutputFile]]) -> list[StepMark]:
        """The counters' latest readings in what each job's files gained since the last call, at ``now``."""
        rules = self.rules()
        if not rules:
            return []
        self._located = located
        marks: list[StepMark] = []
        kept: set[tuple[int, int]] = set()
        for job, files in located.items():
            marks.extend(self._read_job(now, job, files, rules, kept))
        for key in [k for k in self._tails if k not in kept]:
            del self._tails[key]  # its job is no longer located: forgotten
        for job in [j for j in self._first if j not in located]:
            del self._first[job]
        return marks

    def first_steps(self) -> bool:
        """Whether a located job is still before or in its first steps (its files are read between ticks)."""
        return bool(self._opening())

    def opening(self) -> frozenset[str]:
        """The located jobs still before or in their first steps."""
        return frozenset(self._opening())

    def poll_every(self) -> float | None:
        """Seconds until the next ``poll``: POLL while a job is in its first steps, WAITING_POLL while one is
        before them only, None when none is (nothing is read between ticks)."""
        opening = self._opening()
        if not opening:
            return None
        return POLL if any(self._first[job].window.opened for job in opening) else WAITING_POLL

    def poll(self, now: float) -> list[StepMark]:
        """The counters' latest readings, at ``now``, in what the files of the jobs before or in their first
        steps gained."""
        rules = self.rules()
        if not rules:
            return []
        marks: list[StepMark] = []
        kept: set[tuple[int, int]] = set()
        for job in self._opening():
            marks.extend(self._read_job(now, job, self._located[job], rules, kept))
        return marks

    def _opening(self) -> list[str]:
        return [job for job in self._first if not self._window(job).closed]  # the jobs located (read() forgets others)

    def _window(self, job: str) -> Window:
        """The job's first steps' window (opened when its files are first read), closed FIRST_SECONDS after."""
        first = self._first.get(job)
        if first is None:
            first = self._first[job] = _First(self.clock(), Window())
        elif self.clock() - first.located > FIRST_SECONDS:
            first.window.closed = True  # its first steps are not awaited any more
        return first.window

    def _read_job(
        self, now: float, job: str, files: Sequence[OutputFile], rules: Sequence[StepRule], kept: set[tuple[int, int]]
    ) -> list[StepMark]:
        window = self._window(job)
        latest: dict[tuple[str, str, int | None], Count] = {}
        wanted = False
        for f in files:
            key = (f.dev, f.ino)
            if key in kept:
                continue  # two descriptors (stdout and stderr) of one file: read once
            kept.add(key)
            lines = [(now, line) for line in self._new_lines(f)[-LINES_MAX:]]
            for c in counts(lines, rules):
                latest[c.key] = c  # the last reading of each counter (a bar's latest state)
                wanted = window.wants(c) or wanted
        self.wanted += wanted
        return [StepMark(now, job, c.rule, c.name, c.total, c.step) for c in latest.values()]

    def _new_lines(self, f: OutputFile) -> list[str]:
        data = self._new_bytes(f)
        if not data:
            return []
        tail = self._tails[(f.dev, f.ino)]
        data = tail.partial + data
        ended = list(_ENDED.finditer(data))
        end = ended[-1].end() if ended else 0
        rest = data[end:]
        tail.partial = rest if len(rest) <= PARTIAL_MAX else b""
        return [m.group()[:-1].decode("utf-8", "replace") for m in ended if len(m.group()) > 1]

    def _new_bytes(self, f: OutputFile) -> bytes:
        """What ``f`` gained since it was last read (read through its descriptor while its process runs, else
        by its path), if it is still that file."""
        for where in (self.proc / str(f.pid) / "fd" / str(f.fd), Path(f.path)):
            try:
                fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != (f.dev, f.ino):
                    continue  # the pid was reused, or the log replaced
                return self._read_from(fd, (f.dev, f.ino), st.st_size)
            except OSError:
                return b""
            finally:
                os.close(fd)
        return b""

    def _read_from(self, fd: int, key: tuple[int, int], size: int) -> bytes:
        tail = self._tails.get(key)
        if tail is None:
            self._tails[key] = _Tail(size)  # first seen: from its end on
            return b""
        if size < tail.offset:
            tail.offset, tail.partial = 0, b""  # truncated or rewritten: from its start
        start = max(tail.offset, size - READ_MAX)
        skipped = start > tail.offset
        raw = os.pread(fd, size - start, start) if size > start else b""
        tail.offset = start + len(raw)
        if skipped:
            tail.partial = b""  # the line it held is not continued
            cut = min((i for i in (raw.find(b"\n"), raw.find(b"\r")) if i >= 0), default=len(raw) - 1)
            raw = raw[cut + 1 :]  # from the first whole line on
        return raw


class InThread:
    """A ``StepWatch`` read in a thread of its own. Each tick ``offer`` hands it the jobs' files and takes the
    marks it finished since; a request it has not begun is replaced by the newer one (a stuck read costs only
    the marks it would have made). Between requests, while a job is before or in its first steps, it reads
    that job's files every ``StepWatch.poll_every()`` seconds (``StepWatch.poll``, dated by ``wall``) and calls
    ``on_step`` when a read wanted a sample."""

    def __init__(
        self,
        watch: StepWatch,
        on_step: Callable[[], None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.watch = watch
        self.on_step = on_step
        self.wall = wall
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pending: tuple[float, Mapping[str, Sequence[OutputFile]]] | None = None
        self._ready: list[StepMark] = []
        self._opening: frozenset[str] = frozenset()  # as the thread last found them
        self._thread = threading.Thread(target=self._run, name="oomwatch-steps", daemon=True)
        self._thread.start()

    def offer(self, now: float, located: Mapping[str, Sequence[OutputFile]]) -> list[StepMark]:
        with self._lock:
            self._pending = (now, located)
            ready, self._ready = self._ready, []
        self._wake.set()
        return ready

    def opening(self) -> frozenset[str]:
        """The jobs before or in their first steps, as of the thread's last read (``StepWatch.opening``)."""
        with self._lock:
            return self._opening

    def _run(self) -> None:
        every: float | None = None
        while True:
            self._wake.wait(every)
            self._wake.clear()
            with self._lock:
                request, self._pending = self._pending, None
            wanted = self.watch.wanted
            try:
                marks = self.watch.read(*request) if request is not None else self.watch.poll(self.wall())
                every = self.watch.poll_every()
                opening = self.watch.opening()
            except Exception:  # a bug must not end the thread: the next tick tries again
                log.exception("reading the jobs' step counters failed")
                every = None
                continue
            with self._lock:
                self._ready.extend(marks)
                self._opening = opening
            if self.watch.wanted != wanted and self.on_step is not None:
                self.on_step()
