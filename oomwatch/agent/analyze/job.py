"""Live analyzers: what the samples of a job say about the cause, as facts for rules/causes.yaml and
the lines that show them. Pure: history rows in (``ProcessRow``, or anything with the same fields),
:class:`~oomwatch.engine.model.LiveEvidence` out.

- **copy-on-write defeat**: DataLoader workers whose private memory (USS) grew a lot while their
  RSS stayed flat (``history.worker_private_growth_ratio``, ``history.worker_rss_growth_ratio``);
- **per-rank duplication**: ranks of one job each holding a large private set of a like size (peak
  USS at least half the largest rank's: ``history.ranks_similar``, ``history.ranks_uss_bytes``);
- **unbounded growth**: the victim's private memory (USS, when smaps was read at least 3 times;
  else its anonymous memory) grew steadily (least-squares fit: ``history.victim_growth_bytes``,
  ``history.victim_growth_r2``, ``history.victim_growth_basis``);
- **manager growth**: a multiprocessing manager (neither rank nor worker) grew
  (``history.manager_growth_bytes``);
- **swap saturation and memory pressure**: the node's swap nearly full
  (``history.swap_used_ratio``) and tasks stalled waiting for memory, from PSI avg10 of the node or
  the job's cgroups (``history.pressure_some_avg10``, ``history.pressure_full_avg10``, and how long
  "full" stayed high: ``history.pressure_full_seconds``).

Every evidence line says which process and the times of the samples it compares.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oomwatch.agent.analyze.forecast import fit
from oomwatch.engine.model import Evidence, LiveEvidence, LiveProcess
from oomwatch.engine.roles import role_phrase
from oomwatch.engine.sizes import human

SOURCE = "agent history"
MIB = 1 << 20
# seconds between the first and last of at least three samples compared (the 2x thresholds and the
# 32 MiB of growth in the rules guard the rest): a test's workers live half a second, sampled every 0.1 s
MIN_SPAN = 0.2
SIMILAR = 0.5  # ranks whose peak USS is at least half the largest rank's are "similar"
LARGE_RANK_USS = 64 * MIB
SWAP_WORTH_SAYING = 0.5  # swap used ratio from which the evidence line is given
PRESSURE_WORTH_SAYING = 10.0  # PSI avg10 percent ("full", or "some") from which the evidence line is given


@dataclass
class _Series:
    pid: int
    role: str
    rank: int | None
    comm: str
    points: list[tuple[float, int | None, int | None, int | None, int | None]]  # (time, rss, anon, uss, rchar)

    def known(self, i: int) -> list[tuple[float, int]]:
        """(time, value) where field ``i`` (1 rss, 2 anon, 3 uss, 4 rchar) is known."""
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
    read_at: dict[int, Any] = {}
    for r in sorted(rows, key=lambda r: float(_get(r, "time"))):
        pid = _get(r, "pid")
        s = out.get(pid)
        if s is None:
            s = out[pid] = _Series(pid, _get(r, "role") or "unknown", _get(r, "rank"), _get(r, "comm") or "", [])
        role = _get(r, "role")
        if role and role != "unknown":  # its latest known role: a dying process's last sample says "unknown"
            s.role = role
        s.rank = _get(r, "rank") if _get(r, "rank") is not None else s.rank
        uss, rchar = _get(r, "uss"), _get(r, "rchar")
        smaps_time = _get(r, "smaps_time")  # live samples carry it (stored rows hold each reading once)
        if smaps_time is not None:
            if read_at.get(pid) == smaps_time:
                uss = rchar = None  # the same reading carried on to this sample: not a new measurement
            read_at[pid] = smaps_time
        s.points.append((float(_get(r, "time")), _get(r, "rss"), _get(r, "anon"), uss, rchar))
    for s in out.values():
        s.points.sort(key=lambda p: p[0])
    return out


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 10) % 10}"


def _who(s: _Series) -> str:
    return f"pid {s.pid} ({s.comm}, {role_phrase(s.role, s.rank)})"


def analyze(
    rows: Iterable[Any],
    victim_pid: int | None = None,
    *,
    node: Iterable[Any] = (),
    cgroups: Iterable[Any] = (),
) -> LiveEvidence:
    """``rows``: the job's process rows; ``node``: node rows (swap_total, swap_free, pressure_some,
    pressure_full); ``cgroups``: the job's cgroup rows (path, pressure_some, pressure_full)."""
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
        if len(uss) < 3 or len(rss) < 3 or uss[-1][0] - uss[0][0] < MIN_SPAN:
            continue
        ratio = uss[-1][1] / max(uss[0][1], MIB)
        rss_ratio = rss[-1][1] / max(rss[0][1], MIB)
        grows.append((ratio, rss_ratio, uss[-1][1] - uss[0][1], s, uss[0], uss[-1], rss[0][1], rss[-1][1]))
    if grows:
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
                f"{_who(s)}: USS {human(u0[1])} → {human(u1[1])} while RSS {human(r0)} → {human(r1)}, "
                f"samples {_clock(u0[0])}–{_clock(u1[0])}"
            )
            for _, _, _, s, u0, u1, r0, r1 in grows[:3]
        )

    # per-rank duplication: several ranks, each with a large private set of a like size. Each
    # rank's peak: ranks loading the same data at once are killed part-way, at different points.
    ranks = [(s, max(s.known(3), key=lambda p: p[1])) for s in series.values() if s.role == "rank" and s.known(3)]
    if ranks:
        largest = max(u for _, (_, u) in ranks)
        similar = [(s, p) for s, p in ranks if p[1] >= SIMILAR * largest]
        facts["history.ranks"] = len(ranks)
        facts["history.ranks_similar"] = len(similar) if largest >= LARGE_RANK_USS else 0
        facts["history.ranks_uss_bytes"] = int(statistics.median(u for _, (_, u) in ranks))
        facts["history.ranks_uss_sum_bytes"] = sum(u for _, (_, u) in ranks)
        if len(similar) >= 2 and largest >= LARGE_RANK_USS:
            similar.sort(key=lambda r: -r[1][1])
            evidence["ranks_uss"] = tuple(
                ev(f"{_who(s)}: USS {human(u)} at {_clock(t)} (its peak)") for s, (t, u) in similar[:4]
            )

    # unbounded growth of the victim
    victim = series.get(victim_pid) if victim_pid is not None else None
    if victim is not None:
        # its private memory (USS) when smaps was read often enough: a forked worker's anonymous
        # memory starts with what it still shares with its parent, which hides how much it grew
        uss, anon = victim.known(3), victim.known(2)
        basis, points = ("USS", uss) if len(uss) >= 3 and uss[-1][0] - uss[0][0] >= MIN_SPAN else ("anonymous", anon)
        if len(points) >= 3 and points[-1][0] - points[0][0] >= MIN_SPAN:
            line_fit = fit([(t, float(v)) for t, v in points])
            facts["history.victim_growth_basis"] = basis
            facts["history.victim_growth_bytes"] = points[-1][1] - points[0][1]
            facts["history.victim_growth_ratio"] = round(points[-1][1] / max(points[0][1], MIB), 2)
            facts["history.victim_growth_r2"] = round(line_fit[2], 2) if line_fit else None
            what = "USS (private memory)" if basis == "USS" else "anonymous memory"
            evidence["victim_growth"] = (
                ev(
                    f"{_who(victim)}: {what} {human(points[0][1])} → {human(points[-1][1])} in "
                    f"{points[-1][0] - points[0][0]:.1f} s ({_clock(points[0][0])}–{_clock(points[-1][0])})"
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
    _swap_and_pressure(list(node), list(cgroups), facts, evidence, ev)
    return LiveEvidence(facts=facts, evidence=evidence, processes=tuple(_live(s) for s in series.values()))


def _live(s: _Series) -> LiveProcess:
    """A process's private memory over time for the engine (its USS when smaps was read at least 3
    times over MIN_SPAN, else its anonymous memory)."""
    uss, reads = s.known(3), tuple(s.known(4))
    if len(uss) >= 3 and uss[-1][0] - uss[0][0] >= MIN_SPAN:
        return LiveProcess(s.pid, s.comm, s.role, s.rank, "USS", tuple(uss), reads)
    return LiveProcess(s.pid, s.comm, s.role, s.rank, "anonymous", tuple(s.known(2)), reads)


def _swap_and_pressure(
    node: list[Any],
    cgroups: list[Any],
    facts: dict[str, Any],
    evidence: dict[str, tuple[Evidence, ...]],
    ev: Any,
) -> None:
    worst_swap: tuple[float, Any] | None = None
    for n in node:
        total, free = _get(n, "swap_total"), _get(n, "swap_free")
        if total and free is not None:
            ratio = max(0.0, (total - free) / total)
            if worst_swap is None or ratio > worst_swap[0]:
                worst_swap = (ratio, n)
    if worst_swap is not None:
        ratio, n = worst_swap
        total = _get(n, "swap_total")
        facts["history.swap_used_ratio"] = round(ratio, 3)
        facts["history.swap_total_bytes"] = total
        if ratio >= SWAP_WORTH_SAYING:
            used, at = total - _get(n, "swap_free"), _clock(float(_get(n, "time")))
            evidence["swap"] = (ev(f"node: swap {ratio:.0%} used ({human(used)} of {human(total)}) at {at}"),)

    # PSI avg10 of the node and of the job's cgroups: the highest, and where it was
    places = [("node", n) for n in node] + [(f"cgroup {_get(c, 'path')}", c) for c in cgroups]
    worst: dict[str, tuple[float, str, float]] = {}  # kind -> (avg10, where, time)
    full_seconds: dict[str, float] = {}  # where -> seconds with "full" avg10 at or above PRESSURE_WORTH_SAYING
    for where, r in places:
        for kind in ("some", "full"):
            value = _get(r, f"pressure_{kind}")
            if value is None:
                continue
            if kind not in worst or value > worst[kind][0]:
                worst[kind] = (float(value), where, float(_get(r, "time")))
            if kind == "full" and value >= PRESSURE_WORTH_SAYING:
                full_seconds[where] = full_seconds.get(where, 0.0) + float(_get(r, "resolution") or 1.0)
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
                f"{where}: memory pressure full avg10 {value:.1f}% at {_clock(t)} (all its non-idle tasks stalled "
                f"waiting for memory {value:.0f}% of the last 10 s; {full_seconds.get(where, 0.0):.0f} s at "
                f"{PRESSURE_WORTH_SAYING:.0f}% or more)"
            )
        )
    if "some" in worst and worst["some"][0] >= PRESSURE_WORTH_SAYING:
        value, where, t = worst["some"]
        lines.append(
            ev(f"{where}: memory pressure some avg10 {value:.1f}% at {_clock(t)} (tasks stalled waiting for memory)")
        )
    if lines:
        evidence["pressure"] = tuple(lines)


def this_run(rows: list[Any], victim: int) -> list[Any]:
    """The rows of the processes that lived while the victim did: a job id can come back (a launcher
    that sets the same TORCHELASTIC_RUN_ID every time, a rerun in the same pod), and the ranks of an
    earlier run are not this one's."""
    mine = [float(_get(r, "time")) for r in rows if _get(r, "pid") == victim]
    if not mine:
        return rows
    start = min(mine)
    last: dict[int, float] = {}
    for r in rows:
        pid, t = _get(r, "pid"), float(_get(r, "time"))
        last[pid] = max(last.get(pid, t), t)
    return [r for r in rows if last[_get(r, "pid")] >= start]


SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "fish", "tini", "dumb-init", "timeout", "env", "nohup", "sudo"})


def programs(samples: Iterable[Any], by_job: bool = False) -> tuple[tuple[int, str, int], ...]:
    """The separate programs among ``samples`` (processes of one memory cgroup: what the kernel's OOM
    killer chose among): those no other sampled process started, shells and wrappers left out (their
    children are the programs), each with its largest anonymous memory seen. ``by_job``: the
    processes of one training job are one program whatever their parents say (a worker that outlived
    its rank by a moment was re-parented, and its last sample shows it)."""
    by_pid: dict[int, Any] = {}
    jobs: dict[str, list[Any]] = {}
    for p in samples:
        job = _get(p, "job") if by_job and _get(p, "in_job") else None
        if job:
            jobs.setdefault(job, []).append(p)
        else:
            by_pid[_get(p, "pid")] = p
    out = [_one_program(members) for members in jobs.values()]
    for pid, p in by_pid.items():
        comm = _get(p, "comm") or ""
        if comm in SHELLS:
            continue
        parent, started_by_one = _get(p, "ppid"), False
        for _ in range(16):  # up through shells; a torn read's cycle ends here
            if parent not in by_pid:
                break
            if (_get(by_pid[parent], "comm") or "") not in SHELLS:
                started_by_one = True
                break
            parent = _get(by_pid[parent], "ppid")
        if not started_by_one:
            out.append((pid, comm, int(_get(p, "anon") or _get(p, "rss") or 0)))
    return tuple(sorted(out))


def _one_program(members: list[Any]) -> tuple[int, str, int]:
    """A job as one program: its first process, and the largest anonymous memory of any of them."""
    first = min(members, key=lambda m: _get(m, "pid"))
    return _get(first, "pid"), _get(first, "comm") or "", max(int(_get(m, "anon") or 0) for m in members)
