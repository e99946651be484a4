"""A least-squares line through (t, y) points: its slope, intercept and r² (the forecasts, the estimates)."""

from __future__ import annotations

from collections.abc import Sequence


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float, float] | None:
    """(slope, intercept, r²) of the least-squares line through (t, y); None for < 2 points or no spread."""
    n = len(points)
    if n < 2:
        return None
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    stt = sum((t - mt) ** 2 for t, _ in points)
    if stt == 0:
        return None
    sty = sum((t - mt) * (y - my) for t, y in points)
    syy = sum((y - my) ** 2 for _, y in points)
    slope = sty / stt
    r2 = 1.0 if syy == 0 else (sty * sty) / (stt * syy)
    return slope, my - slope * mt, r2
