"""Warnings of memory strain before any kill: the node's swap nearly full, or tasks stalled waiting
for memory (PSI "full" avg10) on the node or a training job's cgroup. Each is said once per episode:
an episode starts at the ``high`` mark and ends when the value falls under the ``low`` mark, so a value
hovering at the threshold is not said every tick. Pure: ticks in, messages out.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomwatch.agent.tick import Tick
from oomwatch.engine.sizes import human

SWAP_HIGH, SWAP_LOW = 0.9, 0.8  # swap used / total
FULL_HIGH, FULL_LOW = 20.0, 10.0  # PSI memory "full" avg10, percent


@dataclass(frozen=True)
class Strain:
    key: str  # "swap", "pressure:node", "pressure:/cgroup/path"
    message: str


class StrainWarner:
    def __init__(
        self,
        swap: tuple[float, float] = (SWAP_HIGH, SWAP_LOW),
        full: tuple[float, float] = (FULL_HIGH, FULL_LOW),
    ) -> None:
        self.swap = swap
        self.full = full
        self._on: set[str] = set()

    def _episode(self, key: str, value: float, marks: tuple[float, float]) -> bool:
        """True when ``value`` starts an episode for ``key``."""
        high, low = marks
        if key in self._on:
            if value < low:
                self._on.discard(key)
            return False
        if value >= high:
            self._on.add(key)
            return True
        return False

    def due(self, tick: Tick) -> list[Strain]:
        out: list[Strain] = []
        n = tick.node
        if n is not None and n.swap_total and n.swap_free is not None:
            used = n.swap_total - n.swap_free
            if self._episode("swap", used / n.swap_total, self.swap):
                out.append(
                    Strain(
                        "swap",
                        f"node swap {used / n.swap_total:.0%} used ({human(used)} of {human(n.swap_total)}): "
                        "the node is out of RAM and paging; the OOM killer is next",
                    )
                )
        places = [("node", "the node", n.pressure if n is not None else None)]
        places += [
            (c.path, f"cgroup {c.path}" + (f" (job {', '.join(c.jobs)})" if c.jobs else ""), c.pressure)
            for c in tick.cgroups
        ]
        for key, where, psi in places:
            full = psi.full.avg10 if psi is not None and psi.full is not None else None
            if full is not None and self._episode(f"pressure:{key}", full, self.full):
                out.append(
                    Strain(
                        f"pressure:{key}",
                        f"memory pressure on {where}: all its non-idle tasks stalled waiting for memory {full:.0f}% "
                        "of the last 10 s (PSI full avg10); it is thrashing",
                    )
                )
        return out
