"""A run's trail of samples stays bounded, keeps its start and thins evenly (the estimator's input)."""

from __future__ import annotations

from oomwatch.agent.recorder import TRAIL_POINTS, Trail


def test_a_long_run_is_thinned_evenly_and_keeps_its_start():
    trail = Trail()
    for i in range(20 * TRAIL_POINTS):
        trail.add((float(i),))
    times = [p[0] for p in trail.points]
    assert TRAIL_POINTS // 2 <= len(times) < TRAIL_POINTS
    assert times[0] == 0.0 and times[-1] >= 20 * TRAIL_POINTS - 2 * trail.stride
    gaps = {b - a for a, b in zip(times, times[1:], strict=False)}
    assert gaps == {float(trail.stride)}  # one stride all along: no stretch of the run is thinner than another


def test_a_short_run_keeps_every_sample():
    trail = Trail()
    for i in range(10):
        trail.add((float(i),))
    assert [p[0] for p in trail.points] == [float(i) for i in range(10)]
