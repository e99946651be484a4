"""Per-rank duplication: ranks of one job each holding a large private set of a like size (peak USS at least
half the largest rank's, or half the largest any rank held at the moment of that peak: ``history.ranks_similar``,
``history.ranks_uss_bytes``)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from oomwatch.agent.analyze.series import MIB, EvidenceMap, Facts, Lines, Series, clock, who
from oomwatch.engine.sizes import human

SIMILAR = 0.5  # ranks whose peak USS is at least half the largest rank's are "similar"
LARGE_RANK_USS = 64 * MIB


def _at(points: list[tuple[float, int]], t: float) -> int | None:
    """The last value known at or before ``t``."""
    before = [u for at, u in points if at <= t]
    return before[-1] if before else None


def duplication(series: Iterable[Series], facts: Facts, evidence: EvidenceMap, ev: Lines) -> None:
    # Each rank's peak: ranks loading the same data at once are killed part-way, at different points. One
    # killed early stands beside what the others held at that moment, not beside what they reached after
    # (the survivors of a kill can double in the next second, into the memory it freed).
    known = [(s, k) for s in series if s.role == "rank" and (k := s.known(3))]
    ranks = [(s, max(k, key=lambda p: p[1])) for s, k in known]
    if not ranks:
        return
    largest = max(u for _, (_, u) in ranks)

    def like(t: float, u: int) -> bool:
        then = [v for _, k in known if (v := _at(k, t)) is not None]
        return u >= SIMILAR * largest or u >= SIMILAR * max(then)

    similar = [(s, p) for s, p in ranks if like(*p)]
    facts["history.ranks"] = len(ranks)
    facts["history.ranks_similar"] = len(similar) if largest >= LARGE_RANK_USS else 0
    facts["history.ranks_uss_bytes"] = int(statistics.median(u for _, (_, u) in ranks))
    facts["history.ranks_uss_sum_bytes"] = sum(u for _, (_, u) in ranks)
    if len(similar) >= 2 and largest >= LARGE_RANK_USS:
        similar.sort(key=lambda r: -r[1][1])
        evidence["ranks_uss"] = tuple(
            ev(f"{who(s)}: USS {human(u)} at {clock(t)} (its peak)") for s, (t, u) in similar[:4]
        )
