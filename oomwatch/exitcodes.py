"""Named exit codes (documented in README.md, section "Exit codes")."""

from collections.abc import Iterable
from enum import IntEnum

from oomwatch.engine.verdicts import BY_ID, MEMORY, NONE, OTHER


class Exit(IntEnum):
    OK = 0  # ran; no memory failure and no crash found
    INTERNAL = 1  # a bug in oomwatch (please report it)
    USAGE = 2  # bad arguments or unreadable input (click uses 2 for usage errors too)
    MEMORY_FAILURE = 3  # a memory failure was found (host, cgroup, userspace, GPU, shm, MemoryError, swap)
    OTHER_FAILURE = 4  # the job failed, but not of memory (crash, scheduler kill, unexplained SIGKILL)
    RULES_INVALID = 5  # `oomwatch rules lint` found errors, or --rules could not be loaded


_BY_CLASS = {MEMORY: Exit.MEMORY_FAILURE, OTHER: Exit.OTHER_FAILURE, NONE: Exit.OK}


def for_verdict(verdict: str) -> Exit:
    """The exit code of a verdict: its exit class in engine.verdicts.TABLE (OK for an unknown one)."""
    known = BY_ID.get(verdict)
    return _BY_CLASS[known.exit_class] if known is not None else Exit.OK


def gravest(verdicts: Iterable[str]) -> Exit:
    """The exit code of several diagnoses (``diagnose --each``): a memory failure in any, else a
    failure that is not memory in any, else OK."""
    codes = {for_verdict(v) for v in verdicts}
    return next((c for c in (Exit.MEMORY_FAILURE, Exit.OTHER_FAILURE) if c in codes), Exit.OK)
