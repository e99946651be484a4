"""Swap saturation and memory pressure: the node's swap nearly full (``history.swap_used_ratio``) and tasks
stalled waiting for memory, from PSI avg10 of the node or the job's cgroups (``history.pressure_some_avg10``,
``history.pressure_full_avg10``, and how long "full" stayed high: ``history.pressure_full_seconds``)."""

from __future__ import annotations

from typing import Any

from oomwatch.agent.analyze.series import EvidenceMap, Facts, Lines, clock, get
from oomwatch.engine.sizes import human

SWAP_WORTH_SAYING = 0.5  # swap used ratio from which the evidence line is given
PRESSURE_WORTH_SAYING = 10.0  # PSI avg10 percent ("full", or "some") from which the evidence line is given


def swap_and_pressure(
    node: list[Any],
    cgroups: list[Any],
    facts: Facts,
    evidence: EvidenceMap,
    ev: Lines,
) -> None:
    worst_swap: tuple[float, Any] | None = None
    for n in node:
        total, free = get(n, "swap_total"), get(n, "swap_free")
        if total and free is not None:
            ratio = max(0.0, (total - free) / total)
            if worst_swap is None or ratio > worst_swap[0]:
                worst_swap = (ratio, n)
    if worst_swap is not None:
        ratio, n = worst_swap
        total = get(n, "swap_total")
        facts["history.swap_used_ratio"] = round(ratio, 3)
        facts["history.swap_total_bytes"] = total
        if ratio >= SWAP_WORTH_SAYING:
            used, at = total - get(n, "swap_free"), clock(float(get(n, "time")))
            evidence["swap"] = (ev(f"node: swap {ratio:.0%} used ({human(used)} of {human(total)}) at {at}"),)

    # PSI avg10 of the node and of the job's cgroups: the highest, and where it was
    places = [("node", n) for n in node] + [(f"cgroup {get(c, 'path')}", c) for c in cgroups]
    worst: dict[str, tuple[float, str, float]] = {}  # kind -> (avg10, where, time)
    full_seconds: dict[str, float] = {}  # where -> seconds with "full" avg10 at or above PRESSURE_WORTH_SAYING
    for where, r in places:
        for kind in ("some", "full"):
            value = get(r, f"pressure_{kind}")
            if value is None:
                continue
            if kind not in worst or value > worst[kind][0]:
                worst[kind] = (float(value), where, float(get(r, "time")))
            if kind == "full" and value >= PRESSURE_WORTH_SAYING:
                full_seconds[where] = full_seconds.get(where, 0.0) + float(get(r, "resolution") or 1.0)
    if not worst:
        return
    for kind, (value, _, _) in worst.items():
        facts[f"history.pressure_{kind}_avg10"] = round(value, 2)
    facts["history.pressure_full_seconds"] = round(max(full_seconds.values(), default=0.0), 1)
    lines = []
    if "full" in worst and worst["full"][0] >= PRESSURE_WORTH_SAYING:
        value, where, t = worst["full"]
        lines.append(
            ev(
                f"{where}: memory pressure full avg10 {value:.1f}% at {clock(t)} (all its non-idle tasks stalled "
                f"waiting for memory {value:.0f}% of the last 10 s; {full_seconds.get(where, 0.0):.0f} s at "
                f"{PRESSURE_WORTH_SAYING:.0f}% or more)"
            )
        )
    if "some" in worst and worst["some"][0] >= PRESSURE_WORTH_SAYING:
        value, where, t = worst["some"]
        lines.append(
            ev(f"{where}: memory pressure some avg10 {value:.1f}% at {clock(t)} (tasks stalled waiting for memory)")
        )
    if lines:
        evidence["pressure"] = tuple(lines)
