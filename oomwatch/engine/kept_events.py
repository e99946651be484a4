"""Which events of one input the scanner keeps: a flood bounded, hints thinned by name (pure).

A line printed a million times is not a million pieces of evidence: of one kind of event, the
first MAX_EVENTS_HEAD and the latest MAX_EVENTS_TAIL are kept, and the middle counted and said.
A hint (a memory figure the job printed, a config value) is printed every step: of each hint name,
the first HINT_HEAD and the latest HINT_TAIL are kept, and of those between, an evenly spaced
sample of at most HINT_MIDDLE (every 2nd, 4th, ... as the flood goes on), so that the series keeps
its shape (engine.growth) and one hint's flood never pushes another's lines out.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from oomwatch.engine.model import Event

MAX_EVENTS_HEAD = 5000  # events of one kind kept from an input's start ...
MAX_EVENTS_TAIL = 5000  # ... and from its end (the middle of a flood is counted and said)
HINT_HEAD = 1000
HINT_TAIL = 1000
HINT_MIDDLE = 1000


class KeptEvents:
    """The events of one input, as the scanner finds them, bounded."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.kind_counts: dict[str, int] = {}
        self.tails: dict[str, deque[Event]] = {}
        self.hint_counts: dict[str, int] = {}  # by hint name
        self.hint_tails: dict[str, deque[Event]] = {}
        self.hint_middle: dict[str, tuple[list[Event], int]] = {}  # the thinned middle, and its stride
        self.events_dropped = 0

    def add(self, event: Event) -> None:
        """Keep an event: of one kind, the first MAX_EVENTS_HEAD and the latest MAX_EVENTS_TAIL (a line
        printed a million times is not a million pieces of evidence); hints by name, thinned."""
        if event.kind == "hint":
            self._add_hint(event)
            return
        seen = self.kind_counts.get(event.kind, 0) + 1
        self.kind_counts[event.kind] = seen
        if seen <= MAX_EVENTS_HEAD:
            self.events.append(event)
            return
        tail = self.tails.setdefault(event.kind, deque(maxlen=MAX_EVENTS_TAIL))
        if len(tail) == MAX_EVENTS_TAIL:
            self.events_dropped += 1
        tail.append(event)

    def _add_hint(self, event: Event) -> None:
        name = event.fields.get("hint", "")
        seen = self.hint_counts.get(name, 0) + 1
        self.hint_counts[name] = seen
        event = replace(event, seq=seen)
        if seen <= HINT_HEAD:
            self.events.append(event)
            return
        tail = self.hint_tails.setdefault(name, deque(maxlen=HINT_TAIL))
        if len(tail) == HINT_TAIL:
            self._thin(name, tail[0])
        tail.append(event)

    def _thin(self, name: str, event: Event) -> None:
        """`event` leaves the tail of its hint's lines: keep every `stride`-th, halving when full."""
        middle, stride = self.hint_middle.get(name, ([], 1))
        if (event.seq or 0) % stride == 0:
            middle.append(event)
            if len(middle) > HINT_MIDDLE:
                stride *= 2
                middle = [ev for ev in middle if (ev.seq or 0) % stride == 0]
        self.hint_middle[name] = (middle, stride)

    def all(self, notes: list[str]) -> list[Event]:
        """The events kept, in the order of their lines; a note added to ``notes`` when some were not kept."""
        if self.hint_tails:
            kept = [ev for middle, _ in self.hint_middle.values() for ev in middle]
            kept += [ev for tail in self.hint_tails.values() for ev in tail]
            # only a stride past 1 drops lines: until then every line leaving a tail is kept
            thinned = sorted((name, stride) for name, (_, stride) in self.hint_middle.items() if stride > 1)
            heads = sum(min(n, HINT_HEAD) for n in self.hint_counts.values())
            dropped = sum(self.hint_counts.values()) - heads - len(kept)
            if dropped > 0:
                names = ", ".join(f"{name} (every {stride})" for name, stride in thinned)
                notes.append(
                    f"{dropped} repeated hint lines in the middle of this input were thinned out: of {names}, "
                    f"the first {HINT_HEAD}, the latest {HINT_TAIL} and an evenly spaced sample between were kept"
                )
            self.events = sorted(self.events + kept, key=lambda ev: ev.line.no)
            self.hint_tails, self.hint_middle = {}, {}
        if not self.tails:
            return self.events
        if self.events_dropped:
            kinds = ", ".join(sorted(k for k, n in self.kind_counts.items() if n > MAX_EVENTS_HEAD + MAX_EVENTS_TAIL))
            notes.append(
                f"{self.events_dropped} lines of the same kind ({kinds}) in the middle of this input were not "
                f"kept: the first {MAX_EVENTS_HEAD} and the latest {MAX_EVENTS_TAIL} of each kind were"
            )
        kept = self.events + [ev for tail in self.tails.values() for ev in tail]
        kept.sort(key=lambda ev: ev.line.no)  # stable: the events of one line keep their order
        return kept
