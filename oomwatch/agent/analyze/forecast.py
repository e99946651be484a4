"""Time to OOM: from the recent trend of memory that cannot be reclaimed, how long until the limit.

Per cgroup of a training job: anon + shmem (page cache is reclaimed before anything is killed; v1
``usage`` counts it, so usage alone would predict kills that never come) against the effective limit.
For the node: ``MemAvailable`` falling toward zero. A least-squares line over the last ``window``
seconds; a forecast is only made when the fit is good (R² ≥ ``min_r2``), spans ``min_span``
seconds with ``min_points`` samples, and the memory is growing. Pure: samples in, forecasts out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from oomwatch.agent.tick import Tick
from oomwatch.engine.fit import fit

WINDOW = 120.0
MIN_POINTS = 6
MIN_SPAN = 5.0
MIN_R2 = 0.8
NODE = "node"
NODE_MIN_SPAN = 30.0
NODE_MIN_POINTS = 10


@dataclass(frozen=True)
class Forecast:
    cgroup: str  # the cgroup's path, or "node"
    jobs: tuple[str, ...]
    used: int  # bytes that cannot be reclaimed now (or, for the node, MemTotal - MemAvailable)
    limit: int
    slope: float  # bytes per second
    seconds: float  # until the limit at this slope
    r2: float


def predict(
    points: Sequence[tuple[float, float]],
    limit: float,
    *,
    min_points: int = MIN_POINTS,
    min_span: float = MIN_SPAN,
    min_r2: float = MIN_R2,
) -> tuple[float, float, float] | None:
    """(seconds to ``limit`` from the last point, slope, r²) or None when no trustworthy growth."""
    if len(points) < min_points or points[-1][0] - points[0][0] < min_span:
        return None
    line = fit(points)
    if line is None:
        return None
    slope, intercept, r2 = line
    if slope <= 0 or r2 < min_r2:
        return None
    now = points[-1][0]
    level = slope * now + intercept  # the fitted value now: less noisy than the last sample
    return max(0.0, (limit - level) / slope), slope, r2


class Trends:
    """Recent unreclaimable memory per cgroup (and node), fed one tick at a time."""

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self._series: dict[str, deque[tuple[float, float]]] = {}

    def _add(self, key: str, t: float, value: float) -> deque[tuple[float, float]]:
        q = self._series.setdefault(key, deque())
        q.append((t, value))
        while q and t - q[0][0] > self.window:
            q.popleft()
        return q

    def add(self, tick: Tick) -> list[Forecast]:
        out: list[Forecast] = []
        seen = set()
        for c in tick.cgroups:
            limit = c.effective_limit
            if not limit or c.anon is None:
                continue
            used = c.anon + (c.shmem or 0)
            seen.add(c.path)
            q = self._add(c.path, tick.time, used)
            p = predict(list(q), limit)
            if p is not None:
                out.append(Forecast(c.path, c.jobs, used, limit, p[1], p[0], p[2]))
        n = tick.node
        if n is not None and n.mem_total and n.mem_available is not None:
            used = n.mem_total - n.mem_available
            seen.add(NODE)
            q = self._add(NODE, tick.time, used)
            # the node's used memory moves with every job and cache: ask for a longer steady trend
            p = predict(list(q), n.mem_total, min_points=NODE_MIN_POINTS, min_span=NODE_MIN_SPAN)
            if p is not None:
                jobs = tuple(sorted(tick.jobs()))
                out.append(Forecast(NODE, jobs, used, n.mem_total, p[1], p[0], p[2]))
        for key in [k for k in self._series if k not in seen]:
            del self._series[key]  # the cgroup is gone (or lost its limit)
        return out


WARN_BEFORE = 600.0  # seconds: log a warning when a limit is predicted to be reached sooner


class Warner:
    """Says a forecast once per episode: again only after the forecast went away (or far off)."""

    def __init__(self, before: float = WARN_BEFORE) -> None:
        self.before = before
        self._warned: set[str] = set()

    def due(self, forecasts: Sequence[Forecast]) -> list[Forecast]:
        near = {f.cgroup: f for f in forecasts if f.seconds <= self.before}
        far = {f.cgroup for f in forecasts if f.seconds <= 2 * self.before}
        self._warned &= far  # an episode ends when the forecast is gone or far off
        new = [f for key, f in near.items() if key not in self._warned]
        self._warned.update(f.cgroup for f in new)
        return new
