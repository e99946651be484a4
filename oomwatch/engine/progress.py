"""A training loop's progress from the lines it printed and when: the step counter the rules name
(rules/activities.yaml `steps`: a progress bar, "step N loss ..."), as (time, steps done) points, and the
rate the steps ran at. Pure: timed lines in, a ``Progress`` out; in two parts for the agent, which keeps the
counters' readings (``counts``) as a job's output grows and assembles them later (``assemble``).

One output can hold several counters (a bar per epoch, an evaluation bar, two ranks printing the same
steps): lines are grouped by counter (the rule, its name, its total), and the counter with the most steps
is the training loop's. Within it the steps only count when they rise: a rank printing the step another
already printed adds nothing, and a counter that starts again below half of where it was (a new epoch's
bar) goes on from where it stood.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from oomwatch.engine.fit import fit
from oomwatch.engine.rules.activity_rules import StepRule
from oomwatch.engine.text import strip_ansi

MIN_POINTS = 3  # steps seen, at least, for a rate
MIN_SPAN = 1.0  # seconds they span, at least
PREFILTER = ("%|", "step", "iter", "━")  # a line with none of these (case-insensitive) holds no step counter


@dataclass(frozen=True)
class Progress:
    points: tuple[tuple[float, int], ...]  # (time, steps done by then), rising
    total: int | None  # what the counter counts to when it prints it (an epoch's steps for an epoch bar)
    rule: str  # the step rule that read it
    restarts: int = 0  # how many times the counter started again (epochs)

    @property
    def last_step(self) -> int:
        return self.points[-1][1]

    def rate(self) -> float | None:
        """Steps per second (a least-squares line through the points), or None with too few of them."""
        if len(self.points) < MIN_POINTS or self.points[-1][0] - self.points[0][0] < MIN_SPAN:
            return None
        line = fit([(t, float(n)) for t, n in self.points])
        return line[0] if line and line[0] > 0 else None


@dataclass(frozen=True)
class Count:
    """One line's reading of a step counter: when, which counter, the step it showed."""

    time: float
    rule: str
    name: str
    total: int | None
    step: int

    @property
    def key(self) -> tuple[str, str, int | None]:
        return (self.rule, self.name, self.total)


def counts(lines: Iterable[tuple[float, str]], rules: Sequence[StepRule]) -> list[Count]:
    """Each of ``lines`` ((time, text), in order) that shows a step counter, read by the first rule that
    reads it. Terminal escapes are read past: a bar drawn for a terminal (rich's colours, a cursor moved up
    before each frame) counts as the same bar written to a file."""
    out: list[Count] = []
    for time, raw in lines:
        text = strip_ansi(raw)
        low = text.lower()
        if not any(p in low for p in PREFILTER):
            continue
        for rule in rules:
            try:
                found = rule.step(text)
            except TimeoutError:
                found = None
            if found is not None:
                step, total, name = found
                out.append(Count(time, rule.id, name, total, step))
                break
    return out


def assemble(seen_counts: Iterable[Count]) -> Progress | None:
    """The training loop's counter of ``seen_counts`` (in order), or None when there is none."""
    counters: dict[tuple[str, str, int | None], list[tuple[float, int]]] = {}
    for c in seen_counts:
        counters.setdefault(c.key, []).append((c.time, c.step))
    if not counters:
        return None
    key, seen = max(counters.items(), key=lambda kv: len({s for _, s in kv[1]}))
    points: list[tuple[float, int]] = []
    top, offset, restarts = -1, 0, 0
    for time, step in seen:
        if top > 0 and step < top / 2:  # a new epoch's bar: go on from where it stood
            offset += key[2] or top
            top, restarts = -1, restarts + 1
        if step > top:
            top = step
            if not points or offset + step > points[-1][1]:
                points.append((time, offset + step))
    return Progress(tuple(points), key[2], key[0], restarts)


def progress(lines: Iterable[tuple[float, str]], rules: Sequence[StepRule]) -> Progress | None:
    """The training loop's counter over ``lines`` ((time, text), in order), or None when no line shows one."""
    return assemble(counts(lines, rules))


def lines_of(data: bytes, marks: Sequence[tuple[int, float]]) -> list[tuple[float, str]]:
    """The lines of ``data`` (split at newlines and carriage returns, as a terminal shows a progress bar), each
    with the time of the first mark at or after its end; ``marks``: (bytes of ``data`` written by then, time),
    rising. Lines past the last mark take its time; a line holding no step counter's words is skipped."""
    out: list[tuple[float, str]] = []
    if not marks:
        return out
    i = 0
    for m in _LINE.finditer(data):
        low = m.group().lower()
        if not any(p in low for p in _PREFILTER_BYTES):
            continue
        while i + 1 < len(marks) and marks[i][0] < m.end():
            i += 1
        out.append((marks[i][1], m.group().decode("utf-8", "replace")))
    return out


_LINE = re.compile(rb"[^\r\n]+")
_PREFILTER_BYTES = tuple(p.encode() for p in PREFILTER)
