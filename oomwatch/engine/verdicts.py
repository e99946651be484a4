"""The verdicts, declared once: each one's id, headline, exit class and what it says ran out.

Every other place that names a set of verdicts derives it from :data:`TABLE`: the rules loader (which
verdicts rules may name), oomwatch.exitcodes (the exit code), oomwatch.render.diagnosis (the headline),
engine.grouping (what ran out) and engine.diagnose (the notes). The diagnosis JSON schema's verdict
enum (oomwatch/data/diagnosis.schema.json) lists the same ids; tests/engine/test_verdicts.py holds
them together.
"""

from __future__ import annotations

from dataclasses import dataclass

MEMORY = "memory"  # exit class: a memory failure (exit 3)
OTHER = "other"  # exit class: the job failed, not of memory (exit 4)
NONE = "none"  # exit class: no failure found (exit 0)


@dataclass(frozen=True)
class Verdict:
    id: str
    headline: str  # the text report's first line, before ``[id, confirmed]``
    exit_class: str  # MEMORY, OTHER or NONE
    oom_kill: bool  # the kernel's OOM killer killed (host or memory cgroup)
    killed: bool  # a process was killed with SIGKILL (by the kernel, a userspace killer, or unexplained)
    ran_out: str | None  # what ran out, when the verdict names it: "host RAM", "GPU memory", "/dev/shm"

    @property
    def memory(self) -> bool:
        return self.exit_class == MEMORY


TABLE: tuple[Verdict, ...] = (
    Verdict("host_oom", "HOST OUT OF MEMORY (kernel OOM killer)", MEMORY, True, True, "host RAM"),
    Verdict("cgroup_oom", "MEMORY LIMIT HIT (cgroup / container / job limit)", MEMORY, True, True, "host RAM"),
    Verdict("userspace_oom_kill", "KILLED BY A USERSPACE OOM KILLER", MEMORY, False, True, "host RAM"),
    Verdict("cuda_oom", "GPU OUT OF MEMORY (CUDA)", MEMORY, False, False, "GPU memory"),
    Verdict("shm_exhausted", "SHARED MEMORY (/dev/shm) EXHAUSTED", MEMORY, False, False, "/dev/shm"),
    Verdict("python_memory_error", "PYTHON MemoryError", MEMORY, False, False, "host RAM"),
    Verdict("swap_thrash", "SWAP EXHAUSTED", MEMORY, False, False, "host RAM"),
    Verdict(
        "sigkill_unexplained",
        "KILLED BY SIGKILL, NOT BY THE OOM KILLER AS FAR AS THE LOGS SHOW",
        OTHER,
        False,
        True,
        "host RAM",
    ),
    # a crash names nothing that ran out: a rank's collateral error after another's kill is one failure
    Verdict("other_crash", "NOT A MEMORY FAILURE (crash or scheduler kill)", OTHER, False, False, None),
    Verdict("no_oom_evidence", "NO MEMORY FAILURE FOUND", NONE, False, False, None),
)

BY_ID: dict[str, Verdict] = {v.id: v for v in TABLE}
IDS: tuple[str, ...] = tuple(v.id for v in TABLE)  # in the table's order (the loader's error lists them)
HEADLINES: dict[str, str] = {v.id: v.headline for v in TABLE}
MEMORY_VERDICTS = frozenset(v.id for v in TABLE if v.exit_class == MEMORY)
OTHER_FAILURE_VERDICTS = frozenset(v.id for v in TABLE if v.exit_class == OTHER)
OOM_KILL_VERDICTS = frozenset(v.id for v in TABLE if v.oom_kill)  # host_oom, cgroup_oom
KILL_VERDICTS = frozenset(v.id for v in TABLE if v.killed)
RAN_OUT: dict[str, str] = {v.id: v.ran_out for v in TABLE if v.ran_out is not None}
NO_OOM_EVIDENCE = "no_oom_evidence"
