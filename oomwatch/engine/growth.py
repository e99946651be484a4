"""The shape of memory over time: a step up then a plateau (data materialized at load: a dataset
in memory, a checkpoint, every rank's copy) against a climb with the steps (accumulation: a cache,
a leak, outputs kept every step). Read from the agent's samples of the victim (its USS, else its
anonymous memory), else from the memory figures the job printed about itself (RSS, ``ru_maxrss``,
psutil, ``free``; the hint ``host_memory``), per rank, in the order printed.

``growth.shape`` is ``step`` when 80% of the rise came in the first 40% of the series and it then
held, ``climb`` when the rise spread over the series (the 80% mark in its last half, a straight
least-squares fit: r² >= 0.8), ``flat`` when it hardly rose, else ``mixed``. A series killed while
it still rises at load looks like a climb: the cause rules weigh it with what the job was doing
(engine.activity). The samples the victim held level at its peak while tasks stalled waiting for
memory (a stall still on at its last sample: ``LiveEvidence.stall``) are left out of the shape: the
limit held it there (the kernel reclaiming and refaulting file pages for seconds before it kills),
and a climb pinned at the limit for 20 s is not a load that held.

Where the job's training steps are known (``LiveEvidence.progress``: when each step line or bar came) and
the series over time is ``mixed`` or a ``step``, it is read again against the steps: memory kept every step
climbs straight against them even when the steps slowed near the limit (the kernel reclaiming for each new
page slows the allocations, and so the loop), which over time bends the climb into a curve, or into a rise
that "held". Only the samples between the first and the last step seen are placed, and only a climb there
that is most of the whole rise counts: a load before the steps, or at one step, is no climb against them.
Pure.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from oomwatch.engine.model import Event, Evidence, LiveProcess, Stall
from oomwatch.engine.roles import role_phrase
from oomwatch.engine.sizes import human, parse_size

MIB = 1 << 20
MIN_POINTS = 3
MIN_RISE = 16 * MIB  # less than this (or 20% of the start) is flat
# a trailing plateau: every value from there on within this share of the last (or MIN_RISE / 2) of it
PLATEAU = 0.05
GROWTH_FACTS = (
    "growth.shape", "growth.basis", "growth.ratio", "growth.bytes", "growth.points", "growth.r2", "growth.read_share",
    "growth.stalled_seconds", "growth.axis",
)  # fmt: skip
COVER = 0.8  # a climb against the steps counts when the samples it places span this share of the rise


def _r2(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return (sxy * sxy) / (sxx * syy)


def shape(points: Sequence[tuple[float, int]]) -> tuple[str, float | None]:
    """(step | climb | flat | mixed, r²) of a series of (time or order, bytes)."""
    if len(points) < MIN_POINTS:
        return "mixed", None
    xs = [float(t) for t, _ in points]
    ys = [float(v) for _, v in points]
    start, peak = ys[0], max(ys)
    rise = peak - start
    r2 = _r2(xs, ys)
    if rise < max(MIN_RISE, 0.2 * start):
        return "flat", r2
    span = xs[-1] - xs[0] or 1.0
    at80 = next(x for x, y in zip(xs, ys, strict=True) if y - start >= 0.8 * rise)
    when = (at80 - xs[0]) / span
    held = ys[-1] - start >= 0.8 * rise
    if when <= 0.4 and held and xs[-1] - at80 > 0:
        return "step", r2
    if when >= 0.5 and r2 is not None and r2 >= 0.8:
        return "climb", r2
    return "mixed", r2


def against_steps(
    points: Sequence[tuple[float, int]], progress: Sequence[tuple[float, int]]
) -> list[tuple[float, int]]:
    """``points`` (time, bytes) placed at the job's steps done by then (interpolated between the step
    readings ``progress``: (time, steps), rising), those between its first and last reading only."""
    if len(progress) < 2:
        return []
    times = [t for t, _ in progress]
    out = []
    for t, v in points:
        if not times[0] <= t <= times[-1]:
            continue
        i = min(bisect_right(times, t), len(times) - 1)
        (ta, sa), (tb, sb) = progress[i - 1], progress[i]
        out.append((sa + (sb - sa) * (t - ta) / (tb - ta) if tb > ta else float(sb), v))
    return out


def _climb_against_steps(
    points: Sequence[tuple[float, int]], progress: Sequence[tuple[float, int]]
) -> tuple[list[tuple[float, int]], float | None] | None:
    """(the samples placed at their steps, r²) when, against the steps, ``points`` climb and those placed
    span COVER of the whole rise; else None."""
    placed = against_steps(points, progress)
    if len(placed) < MIN_POINTS:
        return None
    start = points[0][1]
    rise = max(v for _, v in points) - start
    values = [v for _, v in placed]
    if rise <= 0 or max(values) - min(values) < COVER * rise:
        return None
    kind, r2 = shape(placed)
    return (placed, r2) if kind == "climb" else None


def stalled_tail(points: Sequence[tuple[float, int]], stall: Stall | None) -> int:
    """How many of the last ``points`` to leave out of a growth read: those after the first sample in
    ``stall`` of the trailing plateau (every value from there on within PLATEAU of the last), the
    memory the limit held level while the tasks stalled. 0 without a stall, or where fewer than
    MIN_POINTS would be left."""
    if stall is None or len(points) <= MIN_POINTS:
        return 0
    last = points[-1][1]
    band = max(PLATEAU * last, MIN_RISE / 2)
    i = len(points)
    while i > 0 and abs(points[i - 1][1] - last) <= band:
        i -= 1
    first = next((j for j in range(i, len(points)) if points[j][0] >= stall.start), None)
    if first is None or first + 1 < MIN_POINTS:
        return 0
    return len(points) - (first + 1)


def stalled_words(points: Sequence[tuple[float, int]], dropped: int, stall: Stall | None, what: str) -> str:
    """What a growth line says of the samples ``stalled_tail`` left out of its ``what`` ("" for none)."""
    if not dropped or stall is None:
        return ""
    seconds = points[-1][0] - points[-dropped - 1][0]
    return (
        f"; its last {seconds:.1f} s ({dropped} samples) held level while tasks stalled waiting for memory "
        f"(PSI full avg10 up to {stall.peak:.0f}%, {stall.where}): the limit held it, left out of the {what}"
    )


def _read_share(victim: LiveProcess, points: list[tuple[float, int]]) -> tuple[float | None, int | None]:
    """(bytes it read / bytes its memory rose, bytes read) from its first sample to its peak: near 1,
    data read into memory (a dataset, a checkpoint); near 0, memory that grew on its own."""
    if len(victim.reads) < 2:
        return None, None
    t0 = points[0][0]
    t_peak, peak = max(points, key=lambda p: p[1])
    rise = peak - points[0][1]
    before = [v for t, v in victim.reads if t <= t0] or [victim.reads[0][1]]
    upto = [v for t, v in victim.reads if t <= t_peak]
    if not upto or rise <= 0:
        return None, None
    read = max(0, upto[-1] - before[-1])
    return round(read / rise, 2), read


def printed_series(events: Sequence[Event]) -> dict[tuple[str, str], list[tuple[int, int, Event]]]:
    """The memory figures the job printed about itself: (file, who) -> [(order, bytes, event)]."""
    series: dict[tuple[str, str], list[tuple[int, int, Event]]] = {}
    kept: dict[str, int] = {}  # per file: host_memory hints kept so far (of any rank)
    for ev in events:
        if ev.kind == "hint" and ev.fields.get("hint") == "host_memory":
            # the hints thinned out of a flood before this one (engine.kept_events) still count in its order
            kept[ev.line.file] = kept.get(ev.line.file, 0) + 1
            if ev.line.kernel:
                continue
            skipped = max(0, ev.seq - kept[ev.line.file]) if ev.seq is not None else 0
            size = parse_size(ev.fields.get("value"), ev.fields.get("unit") or "M")
            if size:
                key = (ev.line.file, ev.fields.get("who", ""))
                series.setdefault(key, []).append((len(series.get(key, ())) + skipped, size, ev))
    return series


def growth_facts(
    victim: LiveProcess | None,
    events: Sequence[Event],
    victim_rank: int | None,
    stall: Stall | None = None,
    progress: Sequence[tuple[float, int]] = (),
) -> tuple[dict[str, Any], list[Evidence]]:
    facts: dict[str, Any] = dict.fromkeys(GROWTH_FACTS)
    if victim is not None and len(victim.points) >= MIN_POINTS:
        points = list(victim.points)
        dropped = stalled_tail(points, stall)
        read_from = points[: len(points) - dropped]
        kind, r2 = shape(read_from)
        over_time = kind
        stepped = _climb_against_steps(read_from, progress) if kind in ("mixed", "step") else None
        steps_words = ""
        if stepped is not None:
            placed, r2 = stepped
            kind = "climb"
            steps_words = (
                f"; against the job's training steps a climb (steps {placed[0][0]:.0f} → {placed[-1][0]:.0f}, "
                f"{len(placed)} samples, r² {r2:.2f}): the steps slowed, not the growth"
            )
        who = f"pid {victim.pid} ({victim.comm}, {role_phrase(victim.role, victim.rank)})"
        (t0, v0), (t1, v1) = points[0], points[-1]
        peak = max(v for _, v in points)
        what = "USS (private memory)" if victim.basis == "USS" else "anonymous memory"
        share, read = _read_share(victim, read_from)
        text = (
            f"{who}: {what} {human(v0)} → {human(peak)} (peak) → {human(v1)} over {t1 - t0:.1f} s, "
            f"{len(points)} samples: {over_time}"
            + (f" ({victim.estimated} between smaps reads, from its anonymous memory)" if victim.estimated else "")
            + steps_words
            + stalled_words(points, dropped, stall, "shape")
            + (f"; it read {human(read)} meanwhile" if read is not None else "")
        )
        facts.update(_numbers(kind, f"{victim.basis} samples", v0, peak, len(stepped[0] if stepped else read_from), r2))
        facts["growth.axis"] = "steps" if stepped else "time"
        facts["growth.read_share"] = share
        if dropped:
            facts["growth.stalled_seconds"] = round(points[-1][0] - read_from[-1][0], 1)
        return facts, [Evidence("agent history", 0, text)]
    series = printed_series(events)
    if not series:
        return facts, []
    mine = [s for (_, who), s in series.items() if victim_rank is not None and who == str(victim_rank)]
    chosen = max(mine or list(series.values()), key=len)
    if len(chosen) < MIN_POINTS:
        return facts, []
    kind, r2 = shape([(i, v) for i, v, _ in chosen])
    peak = max(v for _, v, _ in chosen)
    facts.update(_numbers(kind, "printed memory figures", chosen[0][1], peak, len(chosen), r2))
    top = max(chosen, key=lambda c: c[1])
    picked = [chosen[0][2], top[2]] if top is not chosen[0] else [chosen[0][2]]
    if chosen[-1][2] not in picked:
        picked.append(chosen[-1][2])
    return facts, [e.evidence for e in picked]


def _numbers(kind: str, basis: str, first: int, peak: int, n: int, r2: float | None) -> dict[str, Any]:
    return {
        "growth.shape": kind,
        "growth.basis": basis,
        "growth.ratio": round(peak / max(first, MIB), 2),
        "growth.bytes": peak - first,
        "growth.points": n,
        "growth.r2": round(r2, 2) if r2 is not None else None,
    }
