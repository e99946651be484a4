"""What a scenario is: a workload that really produces one host-memory mechanism inside a memory
cgroup limit, and a fixed variant that survives the same limit (the registries are in
scenarios.catalog and scenarios.variants)."""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Prepared", "Scenario"]


@dataclass(frozen=True)
class Prepared:
    """Data a scenario needs, built outside the cgroup (``python -m scenarios.prepare``)."""

    kind: str  # "arrow" or "checkpoint"
    name: str  # file or folder name under the cache directory
    mb: int


@dataclass(frozen=True)
class Scenario:
    """One reproduction: how to run it, broken and fixed, and what the kernel should do."""

    name: str
    title: str
    mechanism: str
    script: str  # file under scenarios/workloads/
    broken_args: tuple[str, ...]
    fixed_args: tuple[str, ...]
    limit: str  # default memory.limit_in_bytes
    nproc: int = 0  # > 0: launched by torchrun with this many ranks (gloo)
    timeout: float = 150.0
    prepare: Prepared | None = None
    # the role (as the sampler names it: rank, dataloader_worker, manager, main, ...) of the
    # process the kernel kills first in the broken run: the largest RSS, not always the hog
    victim_role: str = "unknown"
    cause: str = "unknown"  # the cause id (DESIGN.md) oomwatch must rank first on the broken capture
    fix: str = ""
    env: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what a capture's HOW.md should say about how it behaves
    # a bash command line instead of `[torchrun ...] python script args` (another program beside the
    # job, `accelerate launch`, a pipe): {python}, {torchrun}, {accelerate}, {script}, {workloads},
    # {data} and {ranks} are filled in; `fixed_shell` for the fixed variant (default: `shell` with fixed_args)
    shell: str = ""
    fixed_shell: str = ""
    family: str = "seed"  # "seed": the first reproductions; "variants": scenarios/variants.py
    # the ranks of a job another launcher starts (`accelerate launch`, torch.distributed.run in `shell`,
    # mp.spawn in the script): `{ranks}` in `shell` is filled in with it, or, where the script takes the
    # count, `ranks_flag` names its flag (passed only when scaled: the script's default is `ranks`)
    ranks: int = 0
    ranks_flag: str = ""

    def environment(self) -> dict[str, str]:
        """Extra environment: one intra-op thread per process (torchrun sets this for ranks
        itself), so that 2 cores shared by several processes do not spin in OpenMP barriers."""
        return {**({} if self.nproc else {"OMP_NUM_THREADS": "1"}), **self.env}

    def takes_workers(self) -> bool:
        """Does the workload take a DataLoader worker count (its script declares ``--num-workers`` or
        ``--workers``, and the command line passes the scenario's arguments through)?"""
        return self.workers_flag() is not None

    def workers_flag(self) -> str | None:
        """The flag the workload's script declares for its DataLoader worker count, if any."""
        if (self.shell and "{args}" not in self.shell) or (self.fixed_shell and "{args}" not in self.fixed_shell):
            return None
        try:
            source = (Path(__file__).resolve().parent / "workloads" / self.script).read_text()
        except OSError:
            return None
        found = re.search(r"""add_argument\(\s*["'](--num-workers|--workers)["']""", source)
        return found.group(1) if found else None

    def scaled(self, nproc: int | None = None, workers: int | None = None) -> Scenario:
        """The same scenario with ``nproc`` ranks (torchrun's, or those of the launcher ``ranks`` is set
        for) and/or its workers flag (``--num-workers`` or ``--workers``) with ``workers`` appended to
        both variants' arguments (argparse takes the last value). ValueError when the scenario has no
        rank count to set (for ``nproc``) or its workload takes no worker count."""
        scn = self
        if nproc is not None:
            if nproc < 1:
                raise ValueError(f"--nproc must be at least 1, not {nproc}")
            if self.ranks:
                ranks = (self.ranks_flag, str(nproc)) if self.ranks_flag else ()
                scn = dataclasses.replace(
                    scn, ranks=nproc, broken_args=(*scn.broken_args, *ranks), fixed_args=(*scn.fixed_args, *ranks)
                )
            elif not self.nproc or self.shell or self.fixed_shell:
                raise ValueError(f"{self.name} is not launched by torchrun with a rank count to override")
            else:
                scn = dataclasses.replace(scn, nproc=nproc)
        if workers is not None:
            if workers < 0:
                raise ValueError(f"--workers must be 0 or more, not {workers}")
            flag = self.workers_flag()
            if flag is None:
                raise ValueError(f"{self.name}'s workload takes no --num-workers")
            extra = (flag, str(workers))
            scn = dataclasses.replace(scn, broken_args=(*scn.broken_args, *extra), fixed_args=(*scn.fixed_args, *extra))
        return scn

    def argv(self, fixed: bool, data: Path | None) -> list[str]:
        """The command line (a training script as a user launches it)."""
        script = str(Path("scenarios") / "workloads" / self.script)
        args = [a.replace("{data}", str(data)) for a in (self.fixed_args if fixed else self.broken_args)]
        if self.nproc:
            return [*_torchrun(), "--nproc-per-node", str(self.nproc), script, *args]
        return [sys.executable, script, *args]

    def command(self, fixed: bool, data: Path | None) -> str:
        """The bash command line the runner starts."""
        template = (self.fixed_shell or self.shell) if fixed else self.shell
        if not template:
            return shlex.join(self.argv(fixed, data))
        args = [a.replace("{data}", str(data)) for a in (self.fixed_args if fixed else self.broken_args)]
        bindir = Path(sys.executable).parent
        accelerate = bindir / "accelerate"
        values = {
            "python": shlex.quote(sys.executable),
            "torchrun": shlex.join(_torchrun()),
            "accelerate": shlex.quote(str(accelerate)) if accelerate.exists() else "accelerate",
            "script": shlex.quote(str(Path("scenarios") / "workloads" / self.script)),
            "workloads": shlex.quote(str(Path("scenarios") / "workloads")),
            "data": shlex.quote(str(data)) if data is not None else "",
            "args": shlex.join(args),
            "ranks": str(self.ranks),
        }
        return template.format(**values)


def _torchrun() -> list[str]:
    torchrun = Path(sys.executable).parent / "torchrun"
    return [str(torchrun)] if torchrun.exists() else [sys.executable, "-m", "torch.distributed.run"]
