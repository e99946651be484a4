"""``oomwatch top``'s output: training jobs on this node, job → rank → workers, with private (USS),
proportional (PSS) and resident memory, swap, and growth per minute, as a table for a terminal or the
``oomwatch.top/v1`` JSON document. The rows come from :mod:`oomwatch.agent.top`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from oomwatch import __version__
from oomwatch.agent.tick import CgroupSample, ProcessSample, Tick
from oomwatch.agent.top import History, others_by_rss, tree_order
from oomwatch.engine.sizes import human
from oomwatch.textsafe import escape_controls

TOP_SCHEMA = "oomwatch.top/v1"
STALE_AFTER = 10.0  # seconds: USS/PSS older than this are marked
OTHERS_SHOWN = 5
ROLE_SHORT = {
    "launcher": "launcher",
    "rank": "rank",
    "dataloader_worker": "worker",
    "manager": "manager",
    "unknown": "python",
    "other": "other",
}


def _rate(v: float | None) -> str:
    if v is None:
        return "-"
    sign = "+" if v >= 0 else "-"
    return f"{sign}{human(int(abs(v)))}"


def _cgroup_line(c: CgroupSample) -> str:
    limit = c.effective_limit
    share = f" ({c.usage / limit:.0%})" if limit and c.usage is not None else ""
    of = f" of {human(limit)} limit" if limit else " (no limit)"
    kills = f", {c.oom_kills} OOM kill(s)" if c.oom_kills else ""
    return f"  cgroup {c.path}: {human(c.usage)}{of}{share}, anon {human(c.anon)}{kills}"


HEADER = f"  {'PID':>8}  {'ROLE':<16} {'RANK':>4}  {'COMM':<16} {'RSS':>10} {'USS':>10} {'PSS':>10} {'SWAP':>9}"
HEADER += f" {'RSS/min':>10} {'USS/min':>10}"


def _stale(p: ProcessSample, now: float) -> bool:
    age = p.smaps_age(now)
    return age is not None and age > STALE_AFTER


def _row(depth: int, p: ProcessSample, history: History, now: float) -> str:
    role = ("  " * depth + ("└ " if depth else "") + ROLE_SHORT.get(p.role, p.role))[:16]
    stale = "~" if _stale(p, now) else ""
    rank = "-" if p.rank is None else str(p.rank)
    return (
        f"  {p.pid:>8}  {role:<16} {rank:>4}  {escape_controls(p.comm)[:16]:<16} {human(p.rss):>10} "
        f"{human(p.uss) + stale:>10} {human(p.pss) + stale:>10} {human(p.swap):>9} "
        f"{_rate(history.per_minute(p.pid, 1)):>10} {_rate(history.per_minute(p.pid, 2)):>10}"
    )


def render_text(tick: Tick, history: History, notices: Iterable[str] = ()) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(tick.time))
    lines = [f"oomwatch top {__version__} — {stamp}"]
    n = tick.node
    if n is not None:
        swap = f", swap used {human((n.swap_total or 0) - (n.swap_free or 0))} of {human(n.swap_total)}"
        psi = ""
        if n.pressure and n.pressure.some and n.pressure.some.avg10 is not None:
            psi = f", memory pressure some {n.pressure.some.avg10:.2f}% (avg10)"
        kills = f", {n.oom_kills} OOM kills since boot" if n.oom_kills is not None else ""
        lines.append(f"node: {human(n.mem_available)} available of {human(n.mem_total)}{swap}{psi}{kills}")
    for g in tick.gpus:
        share = f" ({g.used / g.total:.0%})" if g.used is not None and g.total else ""
        lines.append(f"gpu {g.index} {g.name}: {human(g.used)} of {human(g.total)}{share}")
    jobs = tick.jobs()
    if not jobs:
        lines.append("")
        lines.append("no training jobs found (launchers, ranks with RANK/LOCAL_RANK, DataLoader workers)")
    for job, members in sorted(jobs.items()):
        roles = [p.role for p in members]
        summary = ", ".join(
            f"{roles.count(r)} {ROLE_SHORT[r]}{'s' if roles.count(r) > 1 else ''}"
            for r in ("launcher", "rank", "dataloader_worker", "manager", "unknown")
            if r in roles
        )
        total_uss = sum(p.uss or 0 for p in members)
        lines.append("")
        lines.append(f"job {job}: {summary}; RSS {human(sum(p.rss or 0 for p in members))}, USS {human(total_uss)}")
        lines.extend(_cgroup_line(c) for c in tick.cgroups if job in c.jobs)
        lines.append(HEADER)
        lines.extend(_row(depth, p, history, tick.time) for depth, p in tree_order(members))
    others = others_by_rss(tick)
    if others:
        lines.append("")
        lines.append(f"other processes, top {min(OTHERS_SHOWN, len(others))} by RSS:")
        lines.append(HEADER)
        lines.extend(_row(0, p, history, tick.time) for p in others[:OTHERS_SHOWN])
    notes = list(notices)
    if notes:
        lines.append("")
        lines.extend(f"note: {n}" for n in notes)
    if any(_stale(p, tick.time) for p in tick.processes):
        lines.append("~ USS/PSS older than 10 s (smaps_rollup is read on a CPU budget, large processes less often)")
    # job names, comms and cgroups are the processes' own: escaped, each line before they are joined
    return "\n".join(escape_controls(line) for line in lines) + "\n"


def _process_json(p: ProcessSample, history: History, now: float) -> dict[str, Any]:
    age = p.smaps_age(now)
    return {
        "pid": p.pid,
        "ppid": p.ppid,
        "comm": p.comm,
        "role": p.role,
        "job": p.job,
        "rank": p.rank,
        "local_rank": p.local_rank,
        "state": p.state,
        "rss_bytes": p.rss,
        "anon_bytes": p.anon,
        "file_bytes": p.file,
        "shmem_bytes": p.shmem,
        "swap_bytes": p.swap,
        "peak_rss_bytes": p.hwm,
        "pss_bytes": p.pss,
        "uss_bytes": p.uss,
        "swap_pss_bytes": p.swap_pss,
        "smaps_age_seconds": None if age is None else round(age, 3),
        "gpu_memory_bytes": p.gpu_memory,
        "rss_growth_bytes_per_minute": _round(history.per_minute(p.pid, 1)),
        "uss_growth_bytes_per_minute": _round(history.per_minute(p.pid, 2)),
    }


def _round(v: float | None) -> int | None:
    return None if v is None else round(v)


def render_json(tick: Tick, history: History, notices: Iterable[str] = ()) -> str:
    n = tick.node
    doc: dict[str, Any] = {
        "schema": TOP_SCHEMA,
        "time": tick.time,
        "node": None
        if n is None
        else {
            "mem_total_bytes": n.mem_total,
            "mem_available_bytes": n.mem_available,
            "swap_total_bytes": n.swap_total,
            "swap_free_bytes": n.swap_free,
            "oom_kills": n.oom_kills,
            "pressure_some_avg10": n.pressure.some.avg10 if n.pressure and n.pressure.some else None,
        },
        "gpus": [
            {"index": g.index, "uuid": g.uuid, "name": g.name, "used_bytes": g.used, "total_bytes": g.total}
            for g in tick.gpus
        ],  # fmt: skip
        "jobs": [
            {
                "job": job,
                "cgroups": [
                    {
                        "path": c.path,
                        "usage_bytes": c.usage,
                        "limit_bytes": c.limit,
                        "effective_limit_bytes": c.effective_limit,
                        "anon_bytes": c.anon,
                        "oom_kills": c.oom_kills,
                    }
                    for c in tick.cgroups
                    if job in c.jobs
                ],
                "processes": [_process_json(p, history, tick.time) for _, p in tree_order(members)],
            }
            for job, members in sorted(tick.jobs().items())
        ],
        "others": [_process_json(p, history, tick.time) for p in others_by_rss(tick)[:OTHERS_SHOWN]],
        "notices": list(notices),
    }
    return json.dumps(doc, indent=2) + "\n"
