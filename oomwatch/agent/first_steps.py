"""A sample of the job at each of its first training steps (``oomwatch run``).

What a training loop holds once its first steps are done (its optimizer's state, the allocator's arenas grown
to a step's working set) is where a fix that stops an accumulation leaves it; ``oomwatch estimate`` reads it
from the samples taken over the first steps (estimate.model.WARM_STEPS). A loop stepping faster than the
sampler ticks (80 steps a second against a tick every 0.2 s) has its first sample after its first step a dozen
steps later, and what it kept of those steps must then be taken off at a rate measured later: an error of a few
MiB a step becomes tens of MiB. So ``oomwatch run`` wakes its sampler when the job prints a line of its step
counter (the step rules of rules/activities.yaml, as the step counter is read after the run), from the first
counter line until that counter has risen WARM_STEPS past it: a tick comes at each of those steps, however fast
they go. Wakes that come while a tick is being taken make one tick. The rules read no dataset, download or
evaluation bar, so the first counter is the training loop's; another counter's lines meanwhile wake nothing.

It then stops reading: the lines go through the thread that passes the command's output on, and reading them
by the step rules costs ~30 us a line (a job printing more lines than that would be slowed). So it also stops
after WAKES_MAX wakes (a counter that does not rise: every rank printing step 0), and after LINES_MAX lines
holding a counter's words were read with no window closed.

Fed from the threads that pass the command's output through, with the step rules loaded before the command
starts (None: lines wake nothing). Nothing here may stop the output: a failure turns it off.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from oomwatch.engine.progress import counts, lines_of
from oomwatch.engine.rules.activity_rules import StepRule
from oomwatch.estimate.model import WARM_STEPS

log = logging.getLogger("oomwatch.agent")

WAKES_MAX = 4 * WARM_STEPS  # wakes at most, whatever the counter does (a bar redrawn at every batch of a step)
LINES_MAX = 20_000  # lines read by the step rules at most (each costs ~30 us)
PARTIAL_MAX = 8 << 10  # bytes of a line not ended yet that are kept (a longer one is no step counter's)


class FirstSteps:
    """Sets ``wake`` at each step counter line over the job's first steps. ``rules``: the step rules, or None
    while they load."""

    def __init__(self, rules: Callable[[], Sequence[StepRule] | None], wake: threading.Event) -> None:
        self.rules = rules
        self.wake = wake
        self.wakes = 0
        self.lines = 0  # lines read by the step rules
        self._lock = threading.Lock()
        self._first: tuple[tuple[str, str, int | None], int] | None = None  # (the first counter, its first step)
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def feeder(self) -> Callable[[bytes, float], None]:
        """A function to feed one stream's output to, chunk by chunk with the time it came (each stream keeps
        its own line not ended yet)."""
        partial = bytearray()

        def feed(chunk: bytes, now: float) -> None:
            if self._done:
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
                if self._done:
                    return
                if self._first is None:
                    self._first = (c.key, c.step)
                elif c.key != self._first[0]:
                    continue  # another counter's line
                if c.step > self._first[1] + WARM_STEPS:
                    self._done = True
                    return
                self.wakes += 1
                self._done = self.wakes >= WAKES_MAX
            self.wake.set()
