"""The named facts computed: from events, kernel reports and victims, the values rules decide with.

Every name is registered, with its meaning, in engine.fact_names (the only things rules may look
at); here is how each value is found.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oomwatch.engine.cuda_summary import summary_facts
from oomwatch.engine.fact_names import AGENT_FACTS
from oomwatch.engine.kernel_body import is_container_cgroup
from oomwatch.engine.memcg_counters import counter_facts
from oomwatch.engine.model import Event, Observed, OomReport, Victim
from oomwatch.engine.roles import TRAINING_ROLES
from oomwatch.engine.sizes import parse_size
from oomwatch.engine.taskfacts import task_facts


def compute_facts(
    reports: Sequence[OomReport],
    events: Sequence[Event],
    victims: Sequence[Victim],
    kernel_shares: Sequence[float],
    event_kinds: Iterable[str],
    hints: Iterable[str] = (),
) -> dict[str, Any]:
    counts = Counter(ev.kind for ev in events)
    facts: dict[str, Any] = {f"events.{kind}": counts.get(kind, 0) for kind in event_kinds}
    kills = [r for r in reports if r.killed]
    facts["kernel.reports"] = len(reports)
    facts["kernel.kills"] = len(kills)
    facts["kernel.memcg_kills"] = sum(1 for r in kills if r.constraint == "memcg")
    facts["kernel.global_kills"] = sum(1 for r in kills if r.constraint in ("global", "cpuset", "mempolicy"))
    facts["kernel.unknown_kills"] = len(kills) - facts["kernel.memcg_kills"] - facts["kernel.global_kills"]
    facts["kernel.memcg_reports"] = sum(1 for r in reports if r.constraint == "memcg")
    facts["kernel.unknown_reports"] = sum(
        1 for r in reports if not r.killed and r.constraint not in ("memcg", "global", "cpuset", "mempolicy")
    )
    facts["kernel.container_unknown"] = sum(
        1
        for r in reports
        if r.constraint not in ("memcg", "global", "cpuset", "mempolicy")
        and r.mem_total_bytes is None  # the host's Mem-Info is printed only for a global OOM
        and is_container_cgroup(r.trigger_cpuset)
    )
    facts["kernel.manual_kills"] = sum(1 for r in kills if r.manual)
    facts["kernel.group_kills"] = sum(len(r.group_killed) for r in reports)
    facts["victims.count"] = len(victims)
    facts["victims.training"] = sum(1 for v in victims if v.role in TRAINING_ROLES)
    first = victims[0] if victims else None
    facts["victim.role"] = first.role if first else None
    facts["victim.source"] = first.source if first else None
    facts["victim.anon_rss_bytes"] = first.anon_rss_bytes if first else None
    share = max(kernel_shares, default=0.0)
    facts["log.kernel_share"] = share
    facts["log.has_kernel_log"] = share >= 0.5
    facts.update(_swap(events))
    facts["order.cuda_oom_before_kill"] = _cuda_first(reports, events)
    facts["cuda.reserved_unallocated_bytes"] = _reserved_unallocated(events)
    facts["cuda.tried_bytes"] = _max_size(events, "cuda_oom", "tried")
    for name in ("total", "allocated", "free", "reserved"):
        facts[f"cuda.{name}_bytes"] = _max_size(events, "cuda_oom", name)
    unalloc, tried = facts["cuda.reserved_unallocated_bytes"], facts["cuda.tried_bytes"]
    facts["cuda.fragmented"] = unalloc > tried if unalloc is not None and tried is not None else None
    facts.update(summary_facts(events))
    facts.update(counter_facts(events))
    facts["victim.name"] = first.name if first else None
    facts["victim.rank"] = first.rank if first else None
    facts.update(_launcher(events))
    facts.update(_hints(events, hints))
    facts["log.host_memory_growth"] = _memory_growth(events)
    facts.update(task_facts(primary_report(reports, first), first.pid if first else None))
    if facts["tasks.workers_vs_parent"] is None:  # the parent may be gone from the victim's report
        for rep in reports:
            ratio = task_facts(rep, None)["tasks.workers_vs_parent"]
            if ratio is not None:
                facts["tasks.workers_vs_parent"] = ratio
                break
    return facts


def agent_facts(observed: Observed | None) -> dict[str, Any]:
    """The ``agent.*`` facts: None unless the agent observed them (its own incidents)."""
    given = observed.facts if observed is not None else {}
    return {name: given.get(name) for name in AGENT_FACTS}


def primary_report(reports: Sequence[OomReport], victim: Victim | None) -> OomReport | None:
    """The report that killed the first victim, else the first report with a kill, else the first."""
    if victim is not None and victim.source == "kernel":
        for rep in reports:
            if victim.pid in (rep.victim_pid, rep.selected_pid):
                return rep
    return next((r for r in reports if r.killed), reports[0] if reports else None)


def _launcher(events: Sequence[Event]) -> dict[str, Any]:
    """Distinct ranks a launcher reported failed / killed. One rank is often reported on several
    lines (torchrun's ``failed (exitcode: -9) local_rank: 0 (pid: N)``, then its summary's ``rank :
    0 (local_rank: 0)`` and ``exitcode : -9 (pid: N)`` on the next line): a pid is the rank's
    identity, a rank or local rank named beside a pid (on its line or the line after) is that pid."""
    mine = [ev for ev in events if ev.kind in ("sigkill", "launcher_failure")]
    pid_of: dict[tuple[str, str], str] = {}  # ("local_rank" | "rank", value) -> pid
    for i, ev in enumerate(mine):
        pid = ev.fields.get("pid")
        nxt = mine[i + 1] if i + 1 < len(mine) else None
        if pid is None and nxt is not None and nxt.line.file == ev.line.file and 0 < nxt.line.no - ev.line.no <= 2:
            unranked = nxt.fields.get("rank") is None and nxt.fields.get("local_rank") is None
            pid = nxt.fields.get("pid") if unranked else None
        if pid is not None:
            for key in ("rank", "local_rank"):
                if ev.fields.get(key) is not None:
                    pid_of.setdefault((key, ev.fields[key]), pid)
    failed: set[str] = set()
    killed: set[str] = set()
    for ev in mine:
        f = ev.fields
        who = f.get("pid") or next(
            (pid_of[(k, f[k])] for k in ("rank", "local_rank") if f.get(k) is not None and (k, f[k]) in pid_of), None
        )
        if who is None:
            rank = f.get("rank") or f.get("local_rank")
            who = f"rank {rank}" if rank is not None else None
        if who is not None:
            failed.add(who)
            if ev.kind == "sigkill":
                killed.add(who)
    stopped = {p for ev in events if ev.kind == "job_stopping" for p in ev.fields.get("pid", "").split()}
    return {
        "launcher.ranks_failed": len(failed),
        "launcher.ranks_killed": len(killed),
        "launcher.children_stopped": len(stopped),
    }


def _memory_growth(events: Sequence[Event]) -> float | None:
    """How much the memory figures a job prints about itself grew (last / first), per series
    (file and rank); None with fewer than three figures in every series."""
    series: dict[tuple[str, str], list[int]] = {}
    for ev in events:
        if ev.kind == "hint" and ev.fields.get("hint") == "host_memory" and not ev.line.kernel:
            size = parse_size(ev.fields.get("value"), ev.fields.get("unit") or "M")
            if size:
                series.setdefault((ev.line.file, ev.fields.get("who", "")), []).append(size)
    growth = [values[-1] / values[0] for values in series.values() if len(values) >= 3]
    return max(growth) if growth else None


def _hints(events: Sequence[Event], hints: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for hint in hints:
        out[f"hints.{hint}"] = 0
        out[f"hints.{hint}.value"] = None
    per_file: dict[tuple[str, str], int] = {}  # hints of a name in a file, those thinned out counted too
    for ev in events:
        if ev.kind != "hint" or "hint" not in ev.fields:
            continue
        key = f"hints.{ev.fields['hint']}"
        where = (ev.line.file, key)
        was = per_file.get(where, 0)
        per_file[where] = max(was + 1, ev.seq or 0)
        out[key] = out.get(key, 0) + per_file[where] - was
        value = ev.fields.get("value")
        if value is not None and value.isdigit():
            best = out.get(f"{key}.value")
            out[f"{key}.value"] = int(value) if best is None else max(best, int(value))
    return out


SWAP_NEAR = 5  # lines: figures of one swap report split over lines (/proc/meminfo, vmstat -s)
# facts computed from the figures of events of a kind: a verdict over them shows those lines as evidence
FACTS_FROM_EVENTS = {"swap": "swap_full"}


def _swap_figures(events: Sequence[Event]) -> list[tuple[int | None, int | None, int | None]]:
    """(total, used, free) of each swap report; a line that states only some of them (meminfo's
    `SwapTotal:` then `SwapFree:`, vmstat -s's `K total swap` / `K used swap` / `K free swap`) is
    completed by the lines within SWAP_NEAR lines before it in the same file."""
    out: list[tuple[int | None, int | None, int | None]] = []
    near: dict[str, tuple[int, dict[str, int]]] = {}  # file -> (line, figures seen just before)
    for ev in events:
        if ev.kind != "swap_full":
            continue
        unit = ev.fields.get("unit", "")
        figs = {k: parse_size(ev.fields.get(k), unit) for k in ("total", "used", "free")}
        have = {k: v for k, v in figs.items() if v is not None}
        if len(have) == 1:  # one figure per line: gather the report's figures
            line, seen = near.get(ev.line.file, (0, {}))
            seen = {**seen, **have} if ev.line.no - line <= SWAP_NEAR else have
            near[ev.line.file] = (ev.line.no, seen)
            if "total" not in seen or len(seen) < 2:
                continue
            have = seen
        out.append((have.get("total"), have.get("used"), have.get("free")))
    return out


def _swap(events: Sequence[Event]) -> Mapping[str, Any]:
    total_max: int | None = None
    ratio_max: float | None = None
    for total, used, free in _swap_figures(events):
        if used is None and total is not None and free is not None:
            used = total - free
        if total:
            total_max = max(total_max or 0, total)
            if used is not None:
                ratio = used / total
                ratio_max = ratio if ratio_max is None else max(ratio_max, ratio)
    return {"swap.total_bytes": total_max, "swap.used_ratio": ratio_max}


def _cuda_first(reports: Sequence[OomReport], events: Sequence[Event]) -> bool | None:
    kills = [r for r in reports if r.killed]
    cuda = [ev for ev in events if ev.kind in ("cuda_oom", "cublas_alloc_failed")]
    if not kills or not cuda:
        return None
    for ev in cuda:
        for rep in kills:
            if rep.file == ev.line.file and ev.line.no < rep.first_line:
                return True
    return False


def _reserved_unallocated(events: Sequence[Event]) -> int | None:
    """Reserved-but-unallocated GPU memory: said by torch 2.x, reserved - allocated in 1.x."""
    best: int | None = None
    for ev in events:
        if ev.kind != "cuda_oom":
            continue
        value = parse_size(ev.fields.get("reserved_unallocated"))
        if value is None:
            reserved, allocated = parse_size(ev.fields.get("reserved")), parse_size(ev.fields.get("allocated"))
            if reserved is not None and allocated is not None:
                value = max(reserved - allocated, 0)
        if value is not None:
            best = value if best is None else max(best, value)
    return best


def _max_size(events: Sequence[Event], kind: str, field: str) -> int | None:
    sizes = [parse_size(ev.fields.get(field)) for ev in events if ev.kind == kind]
    known = [s for s in sizes if s is not None]
    return max(known) if known else None
