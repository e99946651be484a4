"""Facts from the kernel's task table: who held the memory when the OOM killer ran.

The table lists every process in the OOM domain (the host, or the memory cgroup) with its
RSS. Duplication across ranks shows as several same-named processes of similar size; a
worker-driven blow-up as many `pt_data_worker` rows; another program as a big row that is
not part of the job. RSS counts pages shared after fork in every process that maps them,
so sums over-count shared memory: facts say "RSS", never "private".
"""

from __future__ import annotations

from statistics import median
from typing import Any

from oomwatch.engine.model import OomReport, TaskRow
from oomwatch.engine.roles import PYTHON_PREFIXES, WORKER_COMMS

PEER_MIN_RATIO = 0.5  # a same-named process at least half the victim's size is a peer


def row_rss(row: TaskRow) -> int:
    if row.rss_bytes is not None:
        return row.rss_bytes
    return (row.anon_rss_bytes or 0) + (row.file_rss_bytes or 0) + (row.shmem_rss_bytes or 0)


def _pythonish(name: str) -> bool:
    return name.lower().startswith(PYTHON_PREFIXES)


def task_facts(rep: OomReport | None, victim_pid: int | None) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "tasks.count": 0,
        "tasks.top_name": None,
        "tasks.top_rss_bytes": None,
        "tasks.top_is_victim": None,
        "tasks.top_is_python": None,
        "tasks.same_name_count": None,
        "tasks.peers_count": None,
        "tasks.peers_rss_bytes": None,
        "tasks.peers_similarity": None,
        "tasks.victim_vs_peers": None,
        "tasks.workers_count": None,
        "tasks.workers_rss_bytes": None,
        "tasks.workers_vs_parent": None,
        "tasks.python_rss_share": None,
        "tasks.peers_share_of_capacity": None,
        "victim.share_of_capacity": None,
        "host.mem_total_bytes": rep.mem_total_bytes if rep else None,
        "host.free_swap_bytes": rep.free_swap_bytes if rep else None,
        "cgroup.limit_bytes": rep.memcg_limit_bytes if rep else None,
        "cgroup.usage_bytes": rep.memcg_usage_bytes if rep else None,
        "cgroup.shmem_bytes": None,
        "cgroup.unmapped_shmem_share": None,
        "tasks.shmem_rss_bytes": None,
    }
    if rep is None:
        return facts
    shmem = rep.memcg_stat.get("shmem", rep.memcg_stat.get("total_shmem"))
    if shmem is not None and rep.constraint == "memcg":
        facts["cgroup.shmem_bytes"] = shmem
        mapped = sum(r.shmem_rss_bytes or 0 for r in rep.tasks)
        facts["tasks.shmem_rss_bytes"] = mapped
        if rep.memcg_limit_bytes:
            facts["cgroup.unmapped_shmem_share"] = round(max(0, shmem - mapped) / rep.memcg_limit_bytes, 3)
    capacity = rep.memcg_limit_bytes if rep.constraint == "memcg" else rep.mem_total_bytes
    if capacity and rep.anon_rss_bytes is not None:
        facts["victim.share_of_capacity"] = rep.anon_rss_bytes / capacity
    rows = [r for r in rep.tasks if row_rss(r) > 0]
    if not rows:
        return facts
    total = sum(row_rss(r) for r in rows)
    top = max(rows, key=row_rss)
    ref = next((r for r in rows if r.pid == victim_pid), top)
    same = [r for r in rows if r.name == ref.name]
    peers = [r for r in same if row_rss(r) >= PEER_MIN_RATIO * row_rss(ref)]
    others = [row_rss(r) for r in same if r is not ref]
    workers = [r for r in rows if r.name in WORKER_COMMS]
    peer_sizes = [row_rss(r) for r in peers]
    facts.update(
        {
            "tasks.count": len(rows),
            "tasks.top_name": top.name,
            "tasks.top_rss_bytes": row_rss(top),
            "tasks.top_is_victim": top.pid == victim_pid,
            "tasks.top_is_python": _pythonish(top.name),
            "tasks.same_name_count": len(same),
            "tasks.peers_count": len(peers),
            "tasks.peers_rss_bytes": sum(peer_sizes),
            "tasks.peers_similarity": _ratio(min(peer_sizes, default=0), max(peer_sizes, default=0)),
            "tasks.victim_vs_peers": row_rss(ref) / median(others) if others and median(others) else None,
            "tasks.workers_count": len(workers),
            "tasks.workers_rss_bytes": sum(row_rss(r) for r in workers),
            "tasks.workers_vs_parent": _workers_vs_parent(rows, workers),
            "tasks.python_rss_share": sum(row_rss(r) for r in rows if _pythonish(r.name)) / total if total else None,
            "tasks.peers_share_of_capacity": sum(peer_sizes) / capacity if capacity else None,
        }
    )
    return facts


def _anon(row: TaskRow) -> int:
    """Anonymous RSS where the table has it (>= 6.x `rss_anon`), else the whole RSS."""
    return row.anon_rss_bytes if row.anon_rss_bytes is not None else row_rss(row)


def _workers_vs_parent(rows: list[TaskRow], workers: list[TaskRow]) -> float | None:
    """Median DataLoader worker's (anonymous) memory / its parent's, the biggest other Python
    process. Forked workers share the parent's pages: about 1.0 or less when they only touched
    them (copy-on-write defeat approaches it), well above 1.0 when they allocated their own."""
    parents = [r for r in rows if r not in workers and _pythonish(r.name)]
    if not workers or not parents:
        return None
    parent = max(parents, key=_anon)
    return _ratio(median(_anon(r) for r in workers), _anon(parent))


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def evidence_rows(rep: OomReport, names: set[str] | None = None, limit: int = 4) -> list[TaskRow]:
    """The biggest rows (of the given names), for evidence."""
    rows = [r for r in rep.tasks if names is None or r.name in names]
    return sorted(rows, key=row_rss, reverse=True)[:limit]
