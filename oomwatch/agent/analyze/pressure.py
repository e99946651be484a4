"""Swap saturation and memory pressure: the node's swap nearly full (``history.swap_used_ratio``) and tasks
stalled waiting for memory, from PSI avg10 of the node or the job's cgroups (``history.pressure_some_avg10``,
``history.pressure_full_avg10``, and how long "full" stayed high: ``history.pressure_full_seconds``); and
the stall still on at the victim's last sample (``trailing_stall``), in which its memory holds level
because the limit holds it."""

from __future__ import annotations

from typing import Any

from oomwatch.agent.analyze.series import EvidenceMap, Facts, Lines, clock, get
from oomwatch.engine.model import Stall
from oomwatch.engine.sizes import human

SWAP_WORTH_SAYING = 0.5  # swap used ratio from which the evidence line is given
PRESSURE_WORTH_SAYING = 10.0  # PSI avg10 percent ("full", or "some") from which the evidence line is given
STALL_ONSET = 1.0  # PSI "full" avg10 percent: tasks have begun to stall (a tenth of a second of a full stall)
# walking back from the end, a value this many times the lowest since: an earlier stall that had eased
STALL_EASED = 1.5
SLACK = 1.0  # seconds: a node's pressure is read once a second; the one just after the victim's last sample counts
PSI_PERIOD = 2.0  # seconds: the kernel recomputes avg10 every 2 s, so a reading shows a stall up to 2 s late


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


def trailing_stall(node: list[Any], cgroups: list[Any], until: float) -> Stall | None:
    """The memory stall still on at ``until`` (the victim's last sample). Of each place (the node, each
    of the job's cgroups) whose "full" avg10 is PRESSURE_WORTH_SAYING or more at its last reading by
    then: the foot of that rise, walking back while it stays at STALL_ONSET or more, down to the lowest
    value before an earlier stall that had eased (a value STALL_EASED times that low). avg10 is smoothed:
    it rises steadily through a stall and decays after one; the stall began up to PSI_PERIOD before
    the foot was read. The earliest start of the places, and the highest avg10 since the foot."""
    places: dict[str, list[tuple[float, float]]] = {}
    for where, r in [("node", n) for n in node] + [(f"cgroup {get(c, 'path')}", c) for c in cgroups]:
        value, t = get(r, "pressure_full"), float(get(r, "time"))
        if value is not None and t <= until + SLACK:
            places.setdefault(where, []).append((t, float(value)))
    found: Stall | None = None
    for where, readings in places.items():
        readings.sort()
        if readings[-1][1] < PRESSURE_WORTH_SAYING:
            continue
        low = j = len(readings) - 1
        while j > 0 and readings[j - 1][1] >= STALL_ONSET:
            j -= 1
            if readings[j][1] <= readings[low][1]:
                low = j
            elif readings[j][1] >= STALL_EASED * readings[low][1]:
                break
        foot = readings[low][0]
        peak = max(v for t, v in readings if t >= foot)
        if found is None or foot - PSI_PERIOD < found.start:
            found = Stall(foot - PSI_PERIOD, round(peak, 2), where)
    return found
