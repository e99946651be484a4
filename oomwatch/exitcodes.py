"""Named exit codes (documented in README.md, section "Exit codes")."""

from collections.abc import Iterable
from enum import IntEnum


class Exit(IntEnum):
    OK = 0  # ran; no memory failure and no crash found
    INTERNAL = 1  # a bug in oomwatch (please report it)
    USAGE = 2  # bad arguments or unreadable input (click uses 2 for usage errors too)
    MEMORY_FAILURE = 3  # a memory failure was found (host, cgroup, userspace, GPU, shm, MemoryError, swap)
    OTHER_FAILURE = 4  # the job failed, but not of memory (crash, scheduler kill, unexplained SIGKILL)
    RULES_INVALID = 5  # `oomwatch rules lint` found errors, or --rules could not be loaded


MEMORY_VERDICTS = frozenset(
    {"host_oom", "cgroup_oom", "userspace_oom_kill", "cuda_oom", "shm_exhausted",
     "python_memory_error", "swap_thrash"}
)  # fmt: skip
OTHER_VERDICTS = frozenset({"sigkill_unexplained", "other_crash"})


def for_verdict(verdict: str) -> Exit:
    if verdict in MEMORY_VERDICTS:
        return Exit.MEMORY_FAILURE
    if verdict in OTHER_VERDICTS:
        return Exit.OTHER_FAILURE
    return Exit.OK


def gravest(verdicts: Iterable[str]) -> Exit:
    """The exit code of several diagnoses (``diagnose --each``): a memory failure in any, else a
    failure that is not memory in any, else OK."""
    codes = {for_verdict(v) for v in verdicts}
    return next((c for c in (Exit.MEMORY_FAILURE, Exit.OTHER_FAILURE) if c in codes), Exit.OK)
