"""Named, documented facts: the only things rules may look at.

Python computes facts from events, kernel reports and victims; YAML rules decide with
them. `FACTS` is the registry (name -> meaning); `events.<kind>` exists for every event
kind in rules/events.yaml (how many lines matched). `oomwatch rules lint` rejects a
rule that names a fact that is not here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oomwatch.engine.model import Event, OomReport, Victim
from oomwatch.engine.roles import TRAINING_ROLES
from oomwatch.engine.sizes import parse_size

FACTS: dict[str, str] = {
    "kernel.reports": "kernel OOM-killer reports found (with or without a kill line)",
    "kernel.kills": "kernel reports that name a killed process",
    "kernel.global_kills": "kills by the global OOM killer (constraint none/cpuset/mempolicy)",
    "kernel.memcg_kills": "kills because a memory cgroup hit its limit (CONSTRAINT_MEMCG)",
    "kernel.memcg_reports": "reports (killed or not) that name a memory cgroup limit",
    "kernel.manual_kills": "kills forced by SysRq-f (moom_callback), not by memory pressure",
    "victims.count": "victims found (kernel and log)",
    "victims.training": "victims whose role is launcher, rank, dataloader_worker or manager",
    "victim.role": "role of the first victim",
    "victim.source": "where the first victim came from: kernel, launcher, pytorch, kubernetes...",
    "victim.anon_rss_bytes": "anonymous RSS of the first victim, from the kernel's kill line",
    "log.kernel_share": "largest share, over the inputs, of leading lines that came from the kernel",
    "log.has_kernel_log": "an input is a kernel log (dmesg/journal -k/kern.log): its OOMs would show",
    "swap.total_bytes": "swap size stated by free/meminfo lines",
    "swap.used_ratio": "swap used / total as stated by free/meminfo lines (largest seen)",
    "order.cuda_oom_before_kill": "a CUDA OOM line comes before the first kernel kill in the same file",
    "cuda.reserved_unallocated_bytes": "reserved but unallocated GPU memory from a torch 2.x CUDA OOM",
}


def known_facts(event_kinds: Iterable[str]) -> set[str]:
    return set(FACTS) | {f"events.{kind}" for kind in event_kinds}


def compute_facts(
    reports: Sequence[OomReport],
    events: Sequence[Event],
    victims: Sequence[Victim],
    kernel_shares: Sequence[float],
    event_kinds: Iterable[str],
) -> dict[str, Any]:
    counts = Counter(ev.kind for ev in events)
    facts: dict[str, Any] = {f"events.{kind}": counts.get(kind, 0) for kind in event_kinds}
    kills = [r for r in reports if r.killed]
    facts["kernel.reports"] = len(reports)
    facts["kernel.kills"] = len(kills)
    facts["kernel.memcg_kills"] = sum(1 for r in kills if r.constraint == "memcg")
    facts["kernel.global_kills"] = len(kills) - facts["kernel.memcg_kills"]
    facts["kernel.memcg_reports"] = sum(1 for r in reports if r.constraint == "memcg")
    facts["kernel.manual_kills"] = sum(1 for r in kills if r.manual)
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
    facts["cuda.reserved_unallocated_bytes"] = _max_size(events, "cuda_oom", "reserved_unallocated")
    return facts


def _swap(events: Sequence[Event]) -> Mapping[str, Any]:
    total_max: int | None = None
    ratio_max: float | None = None
    for ev in events:
        if ev.kind != "swap_full":
            continue
        total = parse_size(ev.fields.get("total"), ev.fields.get("unit", ""))
        used = parse_size(ev.fields.get("used"), ev.fields.get("unit", ""))
        free = parse_size(ev.fields.get("free"), ev.fields.get("unit", ""))
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


def _max_size(events: Sequence[Event], kind: str, field: str) -> int | None:
    sizes = [parse_size(ev.fields.get(field)) for ev in events if ev.kind == kind]
    known = [s for s in sizes if s is not None]
    return max(known) if known else None
