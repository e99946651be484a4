"""Which part of a training job a process was, from what a log can tell; and the vocabulary of roles.

Roles (DESIGN.md): launcher, rank, dataloader_worker, manager, other, unknown. The names that tell
them (comms, launcher programs and modules) are declared here once, for the engine (a log's kernel
comm alone) and the agent (oomwatch.agent.sample.process_roles: comm and argv of a live process).
"""

from __future__ import annotations

from collections.abc import Collection

# torch >= 2.1 names DataLoader worker processes `pt_data_worker` and its main process
# `pt_main_thread` (torch.multiprocessing._set_thread_name); the kernel shows these as comm.
WORKER_COMMS = frozenset({"pt_data_worker"})
RANK_COMMS = frozenset({"pt_main_thread"})
# programs that launch ranks whatever their arguments
LAUNCHER_PROGRAMS = frozenset({"torchrun", "deepspeed", "mpirun", "mpiexec", "srun"})
# programs that launch only with a sub-command: `accelerate launch`, `lightning run model`
LAUNCHER_SUBCOMMANDS = {"accelerate": "launch", "lightning": "run"}
LAUNCHER_MODULES = frozenset(
    {
        "torch.distributed.run",
        "torch.distributed.launch",
        "deepspeed.launcher.launch",
        "deepspeed.launcher.runner",
        "accelerate.commands.launch",
        "lightning.fabric.cli",
    }
)
# `python -m X` where X starts with one of these runs a launcher, not the training script (scripts.script_of)
LAUNCHER_MODULE_PREFIXES = ("torch.distributed.run", "torch.distributed.launch", "deepspeed", "accelerate", "lightning")
# a launcher by its comm, whatever its argv: torch's elastic agent and the programs above (the agent's)
LAUNCHER_COMMS = frozenset({"pt_elastic", *LAUNCHER_PROGRAMS})
# a launcher by the comm a log shows, with no argv to read: also `accelerate` (its sub-command unseen)
# and `torch.distribu` (python -m torch.distributed.run, as logs name it)
LOGGED_LAUNCHER_COMMS = LAUNCHER_COMMS | {"accelerate", "torch.distribu"}
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
    if name in LOGGED_LAUNCHER_COMMS:
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
