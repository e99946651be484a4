"""Named, documented facts: the only things rules may look at.

Python computes facts (engine.facts) from events, kernel reports and victims; YAML rules decide with
them. `FACTS` is the registry (name -> meaning); `events.<kind>` exists for every event
kind in rules/events.yaml (how many lines matched); `hints.<hint>` for every hint a
fingerprint of kind `hint` names (how many lines), and `hints.<hint>.value` (the largest
number such lines captured, e.g. prefetch_factor=16 -> 16). `oomwatch rules lint` rejects a
rule that names a fact that is not here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

FACTS: dict[str, str] = {
    "kernel.reports": "kernel OOM-killer reports found (with or without a kill line)",
    "kernel.kills": "kernel reports that name a killed process",
    "kernel.global_kills": "kills by the global OOM killer (constraint none/cpuset/mempolicy)",
    "kernel.unknown_kills": "kills whose report does not say global or memory cgroup (a lone kill line)",
    "kernel.container_unknown": (
        "reports that say neither global nor memory cgroup, of a task whose cpuset is a container's cgroup"
    ),
    "kernel.memcg_kills": "kills because a memory cgroup hit its limit (CONSTRAINT_MEMCG)",
    "kernel.memcg_reports": "reports (killed or not) that name a memory cgroup limit",
    "kernel.unknown_reports": "reports without a kill that say neither global nor memory cgroup (a lone trigger line)",
    "kernel.manual_kills": "kills forced by SysRq-f (moom_callback), not by memory pressure",
    "kernel.group_kills": (
        "processes killed with a report's victim because its cgroup has memory.oom.group set (not counted in "
        "kernel.kills: one failure)"
    ),
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
    "cuda.reserved_unallocated_bytes": "reserved but unallocated GPU memory (2.x says it; 1.x: reserved - allocated)",
    "cuda.tried_bytes": "the allocation a CUDA OOM failed on (largest seen)",
    "cuda.total_bytes": "the GPU's total capacity, from a CUDA OOM message",
    "cuda.allocated_bytes": "memory allocated by PyTorch, from a CUDA OOM message",
    "cuda.free_bytes": "free GPU memory, from a CUDA OOM message",
    "cuda.reserved_bytes": "memory reserved by PyTorch's caching allocator (torch 1.x wording)",
    "cuda.fragmented": "reserved-but-unallocated GPU memory exceeded the failed request (fragmentation)",
    "cuda.summary_allocated_bytes": "allocated GPU memory (Cur Usage) of the last torch.cuda.memory_summary() table",
    "cuda.summary_reserved_bytes": "GPU memory reserved by the caching allocator (Cur Usage) in that table",
    "cuda.summary_unallocated_share": "(reserved - allocated) / reserved in that table: free blocks it holds",
    "victim.name": "kernel name (comm) of the first victim",
    "victim.rank": "rank of the first victim, when a launcher named it",
    "victim.share_of_capacity": "first kernel victim's anon RSS / the cgroup limit (memcg) or MemTotal (global)",
    "launcher.ranks_failed": "distinct ranks a launcher reported as failed",
    "launcher.children_stopped": (
        "children a launcher stopped by pid because one of them had died (torchrun's closing signal, DeepSpeed's "
        "Killing subprocess, mp.spawn's Terminating process); a rank's own Received SIGTERM names none"
    ),
    "launcher.ranks_killed": "distinct ranks a launcher reported as killed by SIGKILL",
    "tasks.count": "processes in the kernel report's task table (with RSS > 0)",
    "tasks.top_name": "name of the process with the largest RSS in the task table",
    "tasks.top_rss_bytes": "largest RSS in the task table",
    "tasks.top_is_victim": "the victim is the largest process of the task table",
    "tasks.top_is_python": "the largest process of the task table is a Python/torch process",
    "tasks.same_name_count": "processes in the task table with the victim's name",
    "tasks.peers_count": "processes with the victim's name and at least half its RSS (the victim included)",
    "tasks.peers_rss_bytes": "RSS of those peers together (shared pages counted in each)",
    "tasks.peers_similarity": "smallest / largest RSS among the peers (1.0: all the same size)",
    "tasks.victim_vs_peers": "victim's RSS / median RSS of the other processes with its name",
    "tasks.workers_count": "DataLoader workers (pt_data_worker) in the task table",
    "tasks.workers_rss_bytes": "RSS of the DataLoader workers together",
    "tasks.workers_vs_parent": (
        "median worker's anonymous RSS / the parent Python process's (>1.3: workers allocated their own)"
    ),
    "log.host_memory_growth": (
        "last / first host-memory figure the log itself prints (rss=, RAM:), per rank; the largest"
    ),
    "tasks.python_rss_share": "share of the task table's RSS held by Python/torch processes",
    "tasks.peers_share_of_capacity": "peers' RSS / the cgroup limit (memcg) or MemTotal (global)",
    "host.mem_total_bytes": "RAM of the host, from the report's Mem-Info (pages RAM)",
    "host.free_swap_bytes": "free swap when the OOM killer ran",
    "cgroup.limit_bytes": "the memory cgroup's limit, from the report",
    "cgroup.counted_oom_kills": (
        "oom_kill of a memory.events / memory.oom_control dump in the inputs (largest): the cgroup's processes "
        "OOM-killed since it was made; None without a dump"
    ),
    "cgroup.counted_ooms": (
        "oom of a memory.events dump (largest): times the cgroup's limit was hit and an allocation was about to fail"
    ),
    "cgroup.counted_group_kills": (
        "oom_group_kill of a memory.events dump (largest): whole-cgroup kills (memory.oom.group)"
    ),
    "cgroup.usage_bytes": "the memory cgroup's usage, from the report",
    "cgroup.shmem_bytes": "shared memory (tmpfs, /dev/shm, shared anonymous) charged to the memory cgroup (its stats)",
    "tasks.shmem_rss_bytes": "shared memory mapped by the task table's processes together (rss_shmem)",
    "cgroup.unmapped_shmem_share": (
        "shared memory charged to the cgroup that no listed process maps / the limit: files in /dev/shm held "
        "open (a DataLoader's batches in flight), not any process's RSS"
    ),
    # From live samples (the agent's history, `oomwatch run`): absent (None) for logs alone.
    "history.workers": "DataLoader workers with USS samples at least 0.4 s apart",
    "history.worker_private_growth_ratio": "median worker's last / first USS (private memory)",
    "history.worker_rss_growth_ratio": "median worker's last / first RSS (flat while USS grows: copy-on-write defeat)",
    "history.worker_uss_growth_bytes": "median worker's USS growth over its samples",
    "history.worker_unshared_share": (
        "median worker's share of its USS growth that its RSS did not grow by: resident pages shared with the "
        "parent that became private (1: copy-on-write; ~0: memory it allocated)"
    ),
    "history.ranks": "ranks with USS samples",
    "history.ranks_similar": (
        "ranks whose peak USS is at least half the largest rank's (or half the most any rank held at that "
        "moment), when the largest is >= 64 MiB"
    ),
    "history.ranks_uss_bytes": "the ranks' median peak USS",
    "history.ranks_uss_sum_bytes": "the ranks' peak USS together",
    "history.victim_growth_basis": "what the victim's growth was measured on: USS (3+ smaps reads), else anonymous",
    "history.victim_growth_bytes": "the victim's USS (or anonymous memory) growth over its samples",
    "history.victim_growth_ratio": "the victim's last / first USS (or anonymous memory)",
    "history.victim_growth_r2": "how straight that growth was (least-squares r², 1.0: a steady climb)",
    "history.manager_growth_bytes": "the largest anonymous-memory growth of a multiprocessing manager",
    "history.swap_used_ratio": "the node's highest swap used / swap total in the samples",
    "history.swap_total_bytes": "the node's swap size",
    "history.pressure_some_avg10": "highest PSI memory 'some' avg10 (percent) of the node or the job's cgroups",
    "history.pressure_full_avg10": "highest PSI memory 'full' avg10 (percent) of the node or the job's cgroups",
    "history.pressure_full_seconds": "seconds that 'full' avg10 stayed at 10% or more (node or one cgroup)",
    # The shape of the job's memory across its processes (engine.jobshape): from the agent's samples
    # when it measured two ranks or more, else from the kernel report's task table.
    "job.basis": "what the job.* facts were measured on: the agent's samples (USS) or the task table (anonymous RSS)",
    "job.ranks": "the job's rank processes measured (ranks: a launcher's children, RANK in the environment...)",
    "job.ranks_alike": "ranks whose private memory is within ±25% of the ranks' median (0 when fewer than 2)",
    "job.ranks_alike_bytes": "the ranks' median private memory",
    "job.ranks_share": "the alike ranks' private memory together / the limit (memcg) or MemTotal",
    "job.top_rank": "the rank with the most private memory (its number, when known)",
    "job.top_rank_ratio": "the largest rank's private memory / the median of the other ranks'",
    "job.top_rank_is_victim": "the largest rank is the process the kernel killed",
    "job.outsider_name": "the largest process of the OOM domain that is not the job's (not Python, not a launcher)",
    "job.outsider_bytes": "its memory (anonymous RSS, else RSS)",
    "job.outsider_share": "its memory / the limit (memcg) or MemTotal",
    "job.trigger_name": "the process that invoked the OOM killer (the report's first line)",
    "job.trigger_outside": "that process is not the job's (not Python, not a launcher)",
    "job.trigger_share": "its memory / the limit (memcg) or MemTotal, when its row can be told",
    "job.programs": (
        "separate programs (none started the other; shells aside) in the victim's memory cgroup holding 10%+ of "
        "its limit each, as the agent or oomwatch run sampled them (samples only)"
    ),
    # The shape over time (engine.growth): the victim's samples, else the figures the job printed.
    "growth.shape": "step (a rise early, then held), climb (a steady rise), flat, mixed; None with < 3 points",
    "growth.basis": "what growth.* was read from: USS/anonymous samples, or printed memory figures",
    "growth.ratio": "peak / first value",
    "growth.bytes": "peak - first value",
    "growth.points": "how many values the shape was read from",
    "growth.axis": (
        "what the samples' shape was read against: time, or the job's training steps (a series mixed, or a step, "
        "over time that climbs against the steps: the steps slowed near the limit)"
    ),
    "growth.r2": "how straight the rise was (least-squares r², 1.0: a steady climb)",
    "growth.capacity_share": (
        "growth.bytes x the processes of the victim's role (sampled; else the ranks that printed figures) / the "
        "limit (memcg) or MemTotal: the most of it that growth can have filled"
    ),
    "growth.stalled_seconds": (
        "seconds at the end the victim held level at its peak while tasks stalled waiting for memory (PSI): "
        "left out of growth.*, the limit held it"
    ),
    "growth.read_share": (
        "bytes the victim read (/proc/PID/io rchar) while its memory rose to its peak / that rise: near 1, data "
        "read into memory (a dataset, a checkpoint); near 0, memory that grew on its own (samples only)"
    ),
    # What each process was doing (engine.activity; rules/activities.yaml): activity.<id> counts the
    # streams (ranks, or files) whose last lines before the kill were that activity.
    "activity.streams": "streams (ranks, or files with no rank) whose last lines show an activity",
    "activity.victim": "the activity of the victim's rank's stream (or of the only stream)",
    "activity.last": "the activity most streams ended in",
    "activity.before_training": (
        "the job's whole output up to the kill is in the inputs and shows no training step: it ran out while "
        "setting up (None when the output's start is not there)"
    ),
    "activity.steps_before_kill": (
        "the training step the job's output had reached before the kill, at least (its step counter in the lines "
        "kept before the failure); None when they show none"
    ),
    # The code that ran (engine.code; rules/code.yaml): code.<id> counts hits, None without code.
    "code.files": "source files of the code that ran that were read (0: none)",
    # What the agent saw itself (its incidents without a kernel report): absent (None) elsewhere.
    "agent.sigkilled": "training processes the agent saw die of SIGKILL (exit events) with no OOM report for them",
    "agent.memory_short": "memory was short in the agent's last sample before the kill (node or the job's cgroup)",
    "agent.counted_kills": "OOM kills a job cgroup's (or the node's) counter added, with no kernel report read",
    "agent.kernel_log": "the agent was following a kernel log (an OOM kill's report would have come through it)",
}

AGENT_FACTS = tuple(name for name in FACTS if name.startswith("agent."))


def hint_names(fingerprints: Iterable[Any]) -> set[str]:
    """Hints named by the fingerprints of kind `hint` (their constant field `hint`)."""
    return {fp.fields["hint"] for fp in fingerprints if fp.event == "hint" and "hint" in fp.fields}


def known_facts(event_kinds: Iterable[str], hints: Iterable[str] = (), rules: Any = None) -> set[str]:
    """Every fact name a rule may use; ``rules`` (a RuleSet) adds ``activity.<id>`` and ``code.<id>``."""
    names = set(FACTS) | {f"events.{kind}" for kind in event_kinds}
    for hint in hints:
        names |= {f"hints.{hint}", f"hints.{hint}.value"}
    if rules is not None:
        names |= {f"activity.{a.id}" for a in rules.activities}
        for c in rules.code:
            names |= {f"code.{c.id}", f"code.{c.id}.value"}
    return names
