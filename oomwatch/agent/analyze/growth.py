"""Unbounded growth: the victim's private memory (USS, when smaps was read at least 3 times, carried
between reads by its anonymous memory; else its anonymous memory) grew steadily (least-squares fit:
``history.victim_growth_bytes``, ``history.victim_growth_r2``, ``history.victim_growth_basis``; what it held
level at the end in a memory stall is left out, as engine.growth does); a
multiprocessing manager (neither rank nor worker) that grew (``history.manager_growth_bytes``)."""

from __future__ import annotations

from collections.abc import Iterable

from oomwatch.agent.analyze.series import MIB, EvidenceMap, Facts, Lines, Series, clock, private, spans, who
from oomwatch.engine.fit import fit
from oomwatch.engine.growth import stalled_tail, stalled_words
from oomwatch.engine.model import Stall
from oomwatch.engine.sizes import human


def victim_growth(victim: Series, facts: Facts, evidence: EvidenceMap, ev: Lines, stall: Stall | None = None) -> None:
    # its private memory (USS) when smaps was read often enough: a forked worker's anonymous
    # memory starts with what it still shares with its parent, which hides how much it grew
    basis, points, estimated = private(victim)
    if not spans(points):
        return
    # what it held level at the end while tasks stalled on memory: the limit held it there
    dropped = stalled_tail(points, stall)
    held = stalled_words(points, dropped, stall, "fit")
    samples = len(points)
    points = points[: samples - dropped]
    line_fit = fit([(t, float(v)) for t, v in points])
    facts["history.victim_growth_basis"] = basis
    facts["history.victim_growth_bytes"] = points[-1][1] - points[0][1]
    facts["history.victim_growth_ratio"] = round(points[-1][1] / max(points[0][1], MIB), 2)
    facts["history.victim_growth_r2"] = round(line_fit[2], 2) if line_fit else None
    what = "USS (private memory)" if basis == "USS" else "anonymous memory"
    evidence["victim_growth"] = (
        ev(
            f"{who(victim)}: {what} {human(points[0][1])} → {human(points[-1][1])} in "
            f"{points[-1][0] - points[0][0]:.1f} s ({clock(points[0][0])}–{clock(points[-1][0])})"
            + (f"; {estimated} of {samples} between smaps reads, from its anonymous memory" if estimated else "")
            + held
        ),
    )


def manager_growth(series: Iterable[Series], facts: Facts, evidence: EvidenceMap, ev: Lines) -> None:
    managers = []
    for s in series:
        anon = s.known(2)
        if s.role == "manager" and len(anon) >= 2:
            managers.append((anon[-1][1] - anon[0][1], s, anon[0], anon[-1]))
    if not managers:
        return
    growth, s, a0, a1 = max(managers, key=lambda m: m[0])
    facts["history.manager_growth_bytes"] = growth
    if growth > 0:
        evidence["manager_growth"] = (
            ev(f"{who(s)}: anonymous memory {human(a0[1])} → {human(a1[1])} ({clock(a0[0])}–{clock(a1[0])})"),
        )
