"""Which part of a training job a process was, from what a log can tell.

Roles (DESIGN.md): launcher, rank, dataloader_worker, manager, other, unknown.
"""

from __future__ import annotations

from collections.abc import Collection

# torch >= 2.1 names DataLoader worker processes `pt_data_worker` and its main process
# `pt_main_thread` (torch.multiprocessing._set_thread_name); the kernel shows these as comm.
WORKER_COMMS = frozenset({"pt_data_worker"})
RANK_COMMS = frozenset({"pt_main_thread"})
LAUNCHER_COMMS = frozenset({"pt_elastic", "torchrun", "deepspeed", "accelerate", "torch.distribu", "mpirun", "srun"})
PYTHON_PREFIXES = ("python", "pt_", "ray::", "ipykernel", "jupyter")
TRAINING_ROLES = frozenset({"launcher", "rank", "dataloader_worker", "manager"})


def role_for(
    name: str | None,
    pid: int | None,
    rank_pids: Collection[int] = (),
    worker_pids: Collection[int] = (),
) -> str:
    """The role of a process from its kernel name and the pids launcher/DataLoader named."""
    if pid is not None and pid in worker_pids:
        return "dataloader_worker"
    if pid is not None and pid in rank_pids:
        return "rank"
    if name is None:
        return "unknown"
    if name in WORKER_COMMS:
        return "dataloader_worker"
    if name in RANK_COMMS:
        return "rank"
    if name in LAUNCHER_COMMS:
        return "launcher"
    if name.lower().startswith(PYTHON_PREFIXES):
        return "unknown"
    return "other"


def role_phrase(role: str | None, rank: int | str | None) -> str:
    """A process's role and rank in words, each said once: ``rank 3`` (not "rank rank 3"), ``rank``
    when its number is unknown, ``dataloader_worker of rank 3``, ``launcher``; ``unknown`` without a role."""
    role = role or "unknown"
    if rank is None or rank == "":
        return role
    return f"rank {rank}" if role == "rank" else f"{role} of rank {rank}"
