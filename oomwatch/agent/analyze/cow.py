"""Copy-on-write defeat: DataLoader workers whose private memory (USS) grew a lot while their RSS stayed flat
(``history.worker_private_growth_ratio``, ``history.worker_rss_growth_ratio``, ``history.worker_unshared_share``)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from oomwatch.agent.analyze.series import MIB, MIN_SPAN, EvidenceMap, Facts, Lines, Series, clock, who
from oomwatch.engine.sizes import human


def copy_on_write(series: Iterable[Series], facts: Facts, evidence: EvidenceMap, ev: Lines) -> None:
    grows: list[tuple[float, float, int, Series, tuple[float, int], tuple[float, int], int, int]] = []
    for s in series:
        if s.role != "dataloader_worker":
            continue
        uss, rss = s.known(3), s.known(1)
        if len(uss) < 3 or len(rss) < 3 or uss[-1][0] - uss[0][0] < MIN_SPAN:
            continue
        ratio = uss[-1][1] / max(uss[0][1], MIB)
        rss_ratio = rss[-1][1] / max(rss[0][1], MIB)
        grows.append((ratio, rss_ratio, uss[-1][1] - uss[0][1], s, uss[0], uss[-1], rss[0][1], rss[-1][1]))
    if not grows:
        return
    facts["history.workers"] = len(grows)
    facts["history.worker_private_growth_ratio"] = round(statistics.median(g[0] for g in grows), 2)
    facts["history.worker_rss_growth_ratio"] = round(statistics.median(g[1] for g in grows), 2)
    facts["history.worker_uss_growth_bytes"] = int(statistics.median(g[2] for g in grows))
    # of the USS growth, the share that RSS did not grow by: pages already resident (shared with the
    # parent) that became private — 1 for copy-on-write, ~0 when a worker allocates new memory
    facts["history.worker_unshared_share"] = round(
        statistics.median(max(0.0, 1 - max(0, g[7] - g[6]) / g[2]) if g[2] > 0 else 0.0 for g in grows), 2
    )
    grows.sort(key=lambda g: -g[2])
    evidence["workers_uss"] = tuple(
        ev(
            f"{who(s)}: USS {human(u0[1])} → {human(u1[1])} while RSS {human(r0)} → {human(r1)}, "
            f"samples {clock(u0[0])}–{clock(u1[0])}"
        )
        for _, _, _, s, u0, u1, r0, r1 in grows[:3]
    )
