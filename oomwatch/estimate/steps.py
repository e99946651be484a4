"""A run's steps as a clock: the rate its training loop's step counter rose at (read from its output by
``engine.progress``), in seconds since the run's first sample, so that a full run's steps become its length
and the time it reaches a limit becomes a step. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.engine.progress import Progress


@dataclass(frozen=True)
class StepClock:
    rate: float  # steps per second
    first: tuple[float, int]  # (seconds since the run's first sample, step) of the first step counted
    last: tuple[float, int]  # ...of the last
    rule: str  # the step rule that read the counter
    started: float = 0.0  # the wall-clock time of the run's first sample (the clock's zero)
    epoch_starts: tuple[float, ...] = ()  # seconds since the first sample at which each epoch began (its counter
    # started again), when the counter printed its total; the first epoch's is its first step's
    total: int | None = None  # the steps of an epoch, when the counter printed them
    points: tuple[tuple[float, int], ...] = ()  # (seconds since the first sample, steps done) as counted

    def first_epoch_done(self, seconds: float) -> float | None:
        """How much of the run's first epoch was done at ``seconds`` since its first sample (the step counted by
        then over the epoch's steps: 1 at its end); None past it, or when the steps of an epoch are not known."""
        if not self.total:
            return None
        done = max(0.0, self.counted_at(seconds)) / self.total  # step n of an epoch of total: n/total of it
        return done if done <= 1.0 else None

    def epochs_between(self, start: float, end: float) -> int:
        """How many of the run's epochs a process alive from ``start`` to ``end`` (seconds since the first sample)
        lived in (1 when the epochs are not known)."""
        if not self.epoch_starts:
            return 1
        ends = (*self.epoch_starts[1:], float("inf"))
        return max(1, sum(1 for a, b in zip(self.epoch_starts, ends, strict=True) if a < end and b > start))

    def seconds_at(self, step: float) -> float:
        """Seconds since the run's first sample when it reaches ``step`` (past the last step seen: at the rate)."""
        t, n = self.last
        return t + (step - n) / self.rate

    def step_at(self, seconds: float) -> float:
        t, n = self.last
        return n + (seconds - t) * self.rate

    def counted_at(self, seconds: float) -> float:
        """The step at ``seconds``: between two counted steps, the line between them; outside them, at the rate."""
        later = next((i for i, (t, _) in enumerate(self.points) if t >= seconds), None)
        if later is None:
            return self.step_at(seconds)
        if later == 0:
            return float(self.points[0][1])
        (t0, n0), (t1, n1) = self.points[later - 1], self.points[later]
        return n0 + (n1 - n0) * (seconds - t0) / (t1 - t0) if t1 > t0 else float(n1)


def clock(progress: Progress | None, started: float) -> StepClock | None:
    """The clock of a counter whose points are wall-clock times, for a run first sampled at ``started``; None
    without a counter or with too few steps for a rate."""
    if progress is None:
        return None
    rate = progress.rate()
    if rate is None:
        return None
    (t0, n0), (t1, n1) = progress.points[0], progress.points[-1]
    epochs: tuple[float, ...] = ()
    if progress.total and progress.restarts:  # each epoch began when the counter passed a multiple of its total
        epochs = tuple(next((t for t, n in progress.points if n >= k * progress.total), t1) - started
                       for k in range(progress.restarts + 1))  # fmt: skip
        epochs = (t0 - started, *epochs[1:])
    points = tuple((t - started, n) for t, n in progress.points)
    return StepClock(rate, (t0 - started, n0), (t1 - started, n1), progress.rule, started, epochs, progress.total,
                     points)  # fmt: skip
