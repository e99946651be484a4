"""A sample of the job at each of its first training steps (``oomwatch run``; the agent's reads of the jobs'
output files, agent.steps, ask the same ``Window`` which steps bring one).

What a training loop holds once its first steps are done (its optimizer's state, the allocator's arenas grown
to a step's working set) is where a fix that stops an accumulation leaves it; ``oomwatch estimate`` reads it
from the samples taken over the first steps (estimate.model.WARM_STEPS). A loop stepping faster than the
sampler ticks (80 steps a second against a tick every 0.2 s) has its first sample after its first step a dozen
steps later, and what it kept of those steps must then be taken off at a rate measured later: an error of a few
MiB a step becomes tens of MiB. So ``oomwatch run`` wakes its sampler when the job prints a line of its step
counter (the step rules of rules/activities.yaml, as the step counter is read after the run), from the first
counter line until that counter has risen WARM_STEPS past it: a tick comes at each of those steps, however fast
they go (WARM_STEPS + 1 at most: a step read again, every rank printing it, brings none). Wakes that come while a
tick is being taken make one tick. The rules read no dataset, download or evaluation bar, so the first counter is
the training loop's; another counter's lines meanwhile wake nothing.

It then stops reading: the lines go through the thread that passes the command's output on, and reading them
by the step rules costs ~30 us a line (a job printing more lines than that would be slowed). So it also stops
after LINES_MAX lines holding a counter's words were read with no window closed (a counter that does not rise).

Fed from the threads that pass the command's output through, with the step rules loaded before the command
starts (None: lines wake nothing). Nothing here may stop the output: a failure turns it off.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from oomwatch.engine.progress import Count, counts, lines_of
from oomwatch.engine.rules.activity_rules import StepRule
from oomwatch.estimate.model import WARM_STEPS

log = logging.getLogger("oomwatch.agent")

LINES_MAX = 20_000  # lines read by the step rules at most (each costs ~30 us)
PARTIAL_MAX = 8 << 10  # bytes of a line not ended yet that are kept (a longer one is no step counter's)


class Window:
    """Which of a job's step counter readings should bring a sample: each new step of the first counter, from its
    first reading until it has risen WARM_STEPS past it (WARM_STEPS + 1 at most). Another counter's readings bring none,
    nor does a step read again (every rank printing it, a bar redrawn within a step) or a restarted counter (the
    next epoch's bar). Also the agent's (agent.steps)."""

    def __init__(self) -> None:
        self.wakes = 0
        self.closed = False
        self._first: tuple[tuple[str, str, int | None], int] | None = None  # (the first counter, its first step)
        self._highest = -1  # the highest step that brought a sample

    @property
    def opened(self) -> bool:
        """Whether its counter's first reading came."""
        return self._first is not None

    def wants(self, c: Count) -> bool:
        if self.closed:
            return False
        if self._first is None:
            self._first = (c.key, c.step)
        elif c.key != self._first[0] or c.step <= self._highest:
            return False
        if c.step > self._first[1] + WARM_STEPS:
            self.closed = True
            return False
        self._highest = c.step
        self.wakes += 1
        return True


class FirstSteps:
    """Sets ``wake`` at each step counter line over the job's first steps. ``rules``: the step rules, or None
    while they load."""

    def __init__(self, rules: Callable[[], Sequence[StepRule] | None], wake: threading.Event) -> None:
        self.rules = rules
        self.wake = wake
        self.lines = 0  # lines read by the step rules
        self._lock = threading.Lock()
        self._window = Window()
        self._done = False

    @property
    def wakes(self) -> int:
        return self._window.wakes

    @property
    def done(self) -> bool:
        return self._done or self._window.closed

    def feeder(self) -> Callable[[bytes, float], None]:
        """A function to feed one stream's output to, chunk by chunk with the time it came (each stream keeps
        its own line not ended yet)."""
        partial = bytearray()

        def feed(chunk: bytes, now: float) -> None:
            if self.done:
                return
            try:
                self._feed(partial, chunk, now)
            except Exception:  # the output goes on: only the wakes stop
                log.exception("first steps: reading the step counter failed; no more samples at the steps")
                self._done = True

        return feed

    def _feed(self, partial: bytearray, chunk: bytes, now: float) -> None:
        data = bytes(partial) + chunk
        end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1  # the lines ended so far
        partial[:] = data[end:] if len(data) - end <= PARTIAL_MAX else b""
        lines = lines_of(data[:end], [(end, now)])  # those holding a step counter's words
        if not lines:
            return
        rules = self.rules()
        if not rules:
            return
        with self._lock:
            self.lines += len(lines)
            self._done = self._done or self.lines > LINES_MAX
        for c in counts(lines, rules):
            with self._lock:
                if self.done:
                    return
                wanted = self._window.wants(c)
            if wanted:
                self.wake.set()
