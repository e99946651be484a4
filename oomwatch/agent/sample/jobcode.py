"""The code a job runs, found while it runs: the command line and working directory of its
launcher or first rank that names a script (``torchrun ... train.py``, ``python -m pkg.train``).
An incident reads that script (and what it imports from its folder) later, through
:func:`oomwatch.scripts.read_program`: the process is gone by then, its files are not. Turned off
with the agent's ``read_code: false``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from oomwatch.engine.model import Program
from oomwatch.procfs.cmdline import parse_cmdline
from oomwatch.scripts import read_program, script_of


@dataclass(frozen=True)
class CodeRef:
    argv: tuple[str, ...]
    cwd: str


def locate_code(pids: Iterable[int], proc: Path = Path("/proc")) -> CodeRef | None:
    """The command line and directory of the first of ``pids`` whose command names a script."""
    for pid in pids:
        try:
            argv = parse_cmdline((proc / str(pid) / "cmdline").read_bytes())
            if script_of(argv) == (None, None):
                continue
            return CodeRef(tuple(argv), os.readlink(proc / str(pid) / "cwd"))
        except OSError:
            continue  # gone, or not ours to read
    return None


def read_code(ref: CodeRef | None) -> Program | None:
    """The code ``ref`` ran, read now (None when nothing was located or nothing could be read)."""
    if ref is None:
        return None
    program = read_program(ref.argv, ref.cwd)
    return program if program.files else None
