"""Live analyzers: what the samples of a job say about the cause, as facts for rules/causes.yaml and
the lines that show them. Pure: history rows in (``ProcessRow``, or anything with the same fields),
:class:`~oomwatch.engine.model.LiveEvidence` out.

- **copy-on-write defeat**: DataLoader workers whose private memory (USS) grew a lot while their
  RSS stayed flat (``history.worker_private_growth_ratio``, ``history.worker_rss_growth_ratio``);
- **per-rank duplication**: ranks of one job each holding a similar, large private set
  (``history.ranks_similar``, ``history.ranks_uss_bytes``);
- **unbounded growth**: the victim's anonymous memory grew steadily (least-squares slope and fit,
  ``history.victim_growth_bytes``, ``history.victim_growth_r2``);
- **manager growth**: a multiprocessing manager (neither rank nor worker) grew
  (``history.manager_growth_bytes``).

Every evidence line says which process and the times of the samples it compares.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oomwatch.agent.forecast import fit
from oomwatch.engine.model import Evidence, LiveEvidence
from oomwatch.engine.sizes import human

SOURCE = "agent history"
MIB = 1 << 20
MIN_SPAN = 0.4  # seconds between the first and last sample compared (the 2x thresholds in the rules guard the rest)
SIMILAR = 0.25  # ranks within ±25% of the median USS are "similar"
LARGE_RANK_USS = 64 * MIB


@dataclass
class _Series:
    pid: int
    role: str
    rank: int | None
    comm: str
    points: list[tuple[float, int | None, int | None, int | None]]  # (time, rss, anon, uss)

    def known(self, i: int) -> list[tuple[float, int]]:
        """(time, value) where field ``i`` (1 rss, 2 anon, 3 uss) is known."""
        out: list[tuple[float, int]] = []
        for p in self.points:
            v = p[i]
            if isinstance(v, int):
                out.append((p[0], v))
        return out


def _get(row: Any, key: str) -> Any:
    return row.get(key) if isinstance(row, Mapping) else getattr(row, key, None)


def _series(rows: Iterable[Any]) -> dict[int, _Series]:
    out: dict[int, _Series] = {}
    for r in rows:
        pid = _get(r, "pid")
        s = out.get(pid)
        if s is None:
            s = out[pid] = _Series(pid, _get(r, "role") or "unknown", _get(r, "rank"), _get(r, "comm") or "", [])
        s.role, s.rank = _get(r, "role") or s.role, _get(r, "rank") if _get(r, "rank") is not None else s.rank
        s.points.append((float(_get(r, "time")), _get(r, "rss"), _get(r, "anon"), _get(r, "uss")))
    for s in out.values():
        s.points.sort(key=lambda p: p[0])
    return out


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 10) % 10}"


def _who(s: _Series) -> str:
    rank = f", rank {s.rank}" if s.rank is not None else ""
    return f"pid {s.pid} ({s.comm}, {s.role}{rank})"


def analyze(rows: Iterable[Any], victim_pid: int | None = None) -> LiveEvidence:
    series = _series(rows)
    facts: dict[str, Any] = {}
    evidence: dict[str, tuple[Evidence, ...]] = {}
    line = 0

    def ev(text: str) -> Evidence:
        nonlocal line
        line += 1
        return Evidence(SOURCE, line, text)

    # copy-on-write defeat: USS up, RSS flat
    grows: list[tuple[float, float, int, _Series, tuple[float, int], tuple[float, int], int, int]] = []
    for s in series.values():
        if s.role != "dataloader_worker":
            continue
        uss, rss = s.known(3), s.known(1)
        if len(uss) < 2 or len(rss) < 2 or uss[-1][0] - uss[0][0] < MIN_SPAN:
            continue
        ratio = uss[-1][1] / max(uss[0][1], MIB)
        rss_ratio = rss[-1][1] / max(rss[0][1], MIB)
        grows.append((ratio, rss_ratio, uss[-1][1] - uss[0][1], s, uss[0], uss[-1], rss[0][1], rss[-1][1]))
    if grows:
        facts["history.workers"] = len(grows)
        facts["history.worker_private_growth_ratio"] = round(statistics.median(g[0] for g in grows), 2)
        facts["history.worker_rss_growth_ratio"] = round(statistics.median(g[1] for g in grows), 2)
        facts["history.worker_uss_growth_bytes"] = int(statistics.median(g[2] for g in grows))
        grows.sort(key=lambda g: -g[2])
        evidence["workers_uss"] = tuple(
            ev(
                f"{_who(s)}: USS {human(u0[1])} → {human(u1[1])} while RSS {human(r0)} → {human(r1)}, "
                f"samples {_clock(u0[0])}–{_clock(u1[0])}"
            )
            for _, _, _, s, u0, u1, r0, r1 in grows[:3]
        )

    # per-rank duplication: several ranks, each with a similar large private set
    ranks = [(s, s.known(3)[-1][1]) for s in series.values() if s.role == "rank" and s.known(3)]
    if ranks:
        median = statistics.median(u for _, u in ranks)
        similar = [(s, u) for s, u in ranks if median and abs(u - median) <= SIMILAR * median]
        facts["history.ranks"] = len(ranks)
        facts["history.ranks_similar"] = len(similar) if median >= LARGE_RANK_USS else 0
        facts["history.ranks_uss_bytes"] = int(median)
        facts["history.ranks_uss_sum_bytes"] = sum(u for _, u in ranks)
        if len(similar) >= 2 and median >= LARGE_RANK_USS:
            evidence["ranks_uss"] = tuple(
                ev(f"{_who(s)}: USS {human(u)} at {_clock(s.known(3)[-1][0])}") for s, u in similar[:4]
            )

    # unbounded growth of the victim
    victim = series.get(victim_pid) if victim_pid is not None else None
    if victim is not None:
        anon = victim.known(2)
        if len(anon) >= 3 and anon[-1][0] - anon[0][0] >= MIN_SPAN:
            line_fit = fit([(t, float(v)) for t, v in anon])
            facts["history.victim_growth_bytes"] = anon[-1][1] - anon[0][1]
            facts["history.victim_growth_ratio"] = round(anon[-1][1] / max(anon[0][1], MIB), 2)
            facts["history.victim_growth_r2"] = round(line_fit[2], 2) if line_fit else None
            evidence["victim_growth"] = (
                ev(
                    f"{_who(victim)}: anonymous memory {human(anon[0][1])} → {human(anon[-1][1])} in "
                    f"{anon[-1][0] - anon[0][0]:.1f} s ({_clock(anon[0][0])}–{_clock(anon[-1][0])})"
                ),
            )

    # a manager (the multiprocessing Manager's server process) that grew
    managers = []
    for s in series.values():
        anon = s.known(2)
        if s.role == "manager" and len(anon) >= 2:
            managers.append((anon[-1][1] - anon[0][1], s, anon[0], anon[-1]))
    if managers:
        growth, s, a0, a1 = max(managers, key=lambda m: m[0])
        facts["history.manager_growth_bytes"] = growth
        if growth > 0:
            evidence["manager_growth"] = (
                ev(f"{_who(s)}: anonymous memory {human(a0[1])} → {human(a1[1])} ({_clock(a0[0])}–{_clock(a1[0])})"),
            )
    return LiveEvidence(facts=facts, evidence=evidence)
