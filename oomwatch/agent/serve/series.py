"""Which processes get series of their own, and how the rest are folded into (job, rank, role) groups: what
bounds the exporter's series by ranks and roles rather than by processes (see ``serve.exporter``)."""

from __future__ import annotations

from oomwatch.agent.tick import ProcessSample, Tick

PROCESS_LABELS = ["training_job", "rank", "local_rank", "role", "pid", "comm"]

# (metric suffix, ProcessSample attribute, help)
PROCESS_GAUGES = (
    ("resident_bytes", "rss", "Resident set size (VmRSS), shared pages included: a forked worker shows its "
     "parent's pages."),
    ("anon_bytes", "anon", "Resident anonymous memory (RssAnon): heap, what the OOM killer frees."),
    ("file_bytes", "file", "Resident file-backed memory (RssFile): mapped files, shared through the page cache."),
    ("shmem_bytes", "shmem", "Resident shared memory (RssShmem): /dev/shm, tmpfs, shared anonymous mappings."),
    ("swap_bytes", "swap", "Swapped-out anonymous memory (VmSwap)."),
    ("resident_peak_bytes", "hwm", "Peak resident set size since the process started (VmHWM)."),
    ("pss_bytes", "pss", "Proportional set size: each shared page divided among its sharers (smaps_rollup)."),
    ("uss_bytes", "uss", "Unique set size: private pages only (smaps_rollup); a worker's USS rising toward its "
     "parent's RSS is copy-on-write defeat."),
    ("swap_pss_bytes", "swap_pss", "Proportional swap (SwapPss, smaps_rollup)."),
    ("smaps_age_seconds", "smaps_age", "How old the pss/uss/swap_pss values are: smaps_rollup is read on a CPU "
     "budget, large processes less often."),
    ("gpu_memory_bytes", "gpu_memory", "GPU memory used by the process (NVML)."),
)  # fmt: skip


def process_labels(p: ProcessSample) -> list[str]:
    """The values of :data:`PROCESS_LABELS` for one process."""
    return [
        p.job or "",
        "" if p.rank is None else str(p.rank),
        "" if p.local_rank is None else str(p.local_rank),
        p.role,
        str(p.pid),
        p.comm,
    ]


TOP_WORKERS = 1  # per-process series per (job, rank, role) group of workers, managers, unknown
PER_PROCESS_ROLES = frozenset({"launcher", "rank"})  # always exported per process (one a rank at most)
ROLE_LABELS = ["training_job", "rank", "role"]
# (metric suffix, ProcessSample attribute, with max, help) of the per-(job, rank, role) aggregates
ROLE_GAUGES = (
    ("resident_bytes", "rss", True, "VmRSS"),
    ("uss_bytes", "uss", True, "USS (smaps_rollup; processes whose smaps was not read yet are left out)"),
    ("anon_bytes", "anon", True, "RssAnon"),
    ("pss_bytes", "pss", False, "PSS (smaps_rollup; processes whose smaps was not read yet are left out)"),
    ("file_bytes", "file", False, "RssFile"),
    ("shmem_bytes", "shmem", False, "RssShmem"),
    ("swap_bytes", "swap", False, "VmSwap"),
    ("gpu_memory_bytes", "gpu_memory", False, "GPU memory (NVML; absent when no process of the group has any)"),
)

Group = tuple[str, str, str]  # training_job, rank, role


def _by_uss(p: ProcessSample) -> tuple[int, int]:
    return (-1 if p.uss is None else p.uss), (p.rss or 0)


def fold(
    tick: Tick, top_n: int, top_workers: int = TOP_WORKERS
) -> tuple[list[ProcessSample], dict[Group, list[ProcessSample]]]:
    """What is exported per process, and the (job, rank, role) groups aggregated: every launcher and rank
    of a job; of each other group of a job (workers, managers, unknown) its ``top_workers`` by USS (RSS
    until smaps is read); the ``top_n`` processes outside jobs by RSS. Kernel threads and zombies never.
    A group holds all its processes, those exported per process too."""
    exported: list[ProcessSample] = []
    groups: dict[Group, list[ProcessSample]] = {}
    others: list[ProcessSample] = []
    for p in tick.processes:
        if not p.in_job:
            if p.rss:
                others.append(p)
        elif p.role in PER_PROCESS_ROLES:
            exported.append(p)
        else:
            key = (p.job or "", "" if p.rank is None else str(p.rank), p.role)
            groups.setdefault(key, []).append(p)
    for members in groups.values():
        if top_workers > 0:
            exported += sorted(members, key=_by_uss, reverse=True)[:top_workers]
    others.sort(key=lambda p: -(p.rss or 0))
    return exported + others[:top_n], groups


def exported_processes(tick: Tick, top_n: int, top_workers: int = TOP_WORKERS) -> list[ProcessSample]:
    """The processes with per-process series (see :func:`fold`)."""
    return fold(tick, top_n, top_workers)[0]
