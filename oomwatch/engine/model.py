"""Frozen data model shared by every part of oomwatch.

The engine is pure: these classes carry data between the edges (sources, renderers)
and the rule-driven core. Nothing here reads files, clocks or /proc.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Line:
    """One input line after decoding and prefix stripping.

    `no` is the 1-based line number in the original file (newline-separated), `time`
    the timestamp text found in the stripped prefix (or None), `text` the message
    with the prefix removed. `raw_prefix` keeps what was stripped, for evidence.
    """

    file: str
    no: int
    time: str | None
    text: str
    truncated: bool = False
    kernel: bool = False  # the prefix said this line came from the kernel
    host: str | None = None  # syslog/journal host field, when the prefix had one


@dataclass(frozen=True)
class Evidence:
    """A line that proves something: where it is and what it says."""

    file: str
    line: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "text": self.text}


@dataclass(frozen=True)
class LiveProcess:
    """One process of the job as sampled live: its private memory over time (USS when smaps_rollup
    was read, carried between reads by how its anonymous memory moved; else anonymous RSS: ``basis``),
    for the shape of the job (engine.jobshape) and of its growth (engine.growth)."""

    pid: int
    comm: str
    role: str
    rank: int | None
    basis: str  # "USS" or "anonymous"
    points: tuple[tuple[float, int], ...]  # (wall-clock time, bytes), oldest first
    reads: tuple[tuple[float, int], ...] = ()  # (time, bytes read so far: /proc/PID/io rchar)
    estimated: int = 0  # of the USS points, those between smaps reads (from how anonymous memory moved)

    @property
    def peak(self) -> int:
        return max((v for _, v in self.points), default=0)


@dataclass(frozen=True)
class Stall:
    """Tasks stalled waiting for memory from ``start`` on, still at the victim's last sample: PSI "full"
    avg10 up to ``peak`` percent, at ``where`` (the node, or a cgroup). Memory that holds level then
    is held by its limit, not by the job (engine.growth)."""

    start: float
    peak: float
    where: str


@dataclass(frozen=True)
class LiveEvidence:
    """What live samples add (the agent's history, ``oomwatch run``): ``history.*`` facts for the
    rules, evidence lines by topic (a cause signal names one as ``history:<topic>``), and the job's
    processes as sampled."""

    facts: Mapping[str, Any] = field(default_factory=dict)
    evidence: Mapping[str, tuple[Evidence, ...]] = field(default_factory=dict)
    processes: tuple[LiveProcess, ...] = ()
    # separate programs that shared the victim's memory limit (none started the other): (pid, comm, bytes)
    programs: tuple[tuple[int, str, int], ...] = ()
    stall: Stall | None = None  # the memory stall the victim's samples end in
    # the job's training steps: (time, steps done by then), rising (engine.progress), when its output showed them
    progress: tuple[tuple[float, int], ...] = ()


@dataclass(frozen=True)
class SourceFile:
    """A file of the code that ran (the training script, a module it imports from its folder)."""

    path: str  # as shown in evidence
    text: str


@dataclass(frozen=True)
class Program:
    """The code that ran: its source files, and the command line that ran them (None when not
    known, e.g. ``diagnose --script``: a flag's value then falls back to its default)."""

    files: tuple[SourceFile, ...] = ()
    argv: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Event:
    """One fingerprint match: `kind` from the rule, captured `fields` from its pattern."""

    kind: str
    rule: str
    line: Line
    fields: dict[str, str] = field(default_factory=dict)
    # of a hint, its number among the input's hints of that name (1, 2, ...): where some were thinned
    # out of a flood (engine.kept_events), how many came before it
    seq: int | None = field(default=None, compare=False)

    @property
    def evidence(self) -> Evidence:
        return Evidence(self.line.file, self.line.no, self.line.text)


@dataclass(frozen=True)
class TaskRow:
    """A row of the kernel's task table ("Tasks state (memory values in pages)").

    All sizes are in bytes (pages × page size 4096, or the table's own unit)."""

    pid: int
    tgid: int | None
    uid: int | None
    name: str
    total_vm_bytes: int | None
    rss_bytes: int | None
    anon_rss_bytes: int | None
    file_rss_bytes: int | None
    shmem_rss_bytes: int | None
    swap_bytes: int | None
    oom_score_adj: int | None
    line: int
    text: str = ""  # the row as the kernel printed it (for evidence)


@dataclass(frozen=True)
class KilledTask:
    """A process the kernel killed together with a report's victim (``memory.oom.group``): its own
    ``Killed process`` line, sizes in bytes as that line gave them."""

    pid: int
    name: str | None
    anon_rss_bytes: int | None
    file_rss_bytes: int | None
    shmem_rss_bytes: int | None
    line: int


@dataclass(frozen=True)
class OomReport:
    """One kernel OOM-killer report assembled from its many lines.

    `trigger_*` is the task that invoked the OOM killer (often NOT the victim).
    `victim_*` is the process the kernel actually killed (from "Killed process").
    `constraint` is "global", "memcg", "cpuset", "mempolicy" or None when unknown.
    `oom_group` is the cgroup whose ``memory.oom.group`` made the kernel kill all its tasks with
    the victim ("Tasks in X are going to be killed due to memory.oom.group set"), and
    `group_killed` those other tasks: one failure, one victim, the rest killed with it.
    """

    file: str
    first_line: int
    last_line: int
    time: str | None
    trigger_name: str | None = None
    trigger_pid: int | None = None
    gfp_mask: str | None = None
    order: int | None = None
    trigger_cpuset: str | None = None  # `NAME cpuset=X mems_allowed=...`: the trigger's cpuset cgroup
    constraint: str | None = None
    selected_pid: int | None = None  # "Kill process N ... or sacrifice child"
    selected_name: str | None = None
    victim_pid: int | None = None
    victim_name: str | None = None
    victim_uid: int | None = None
    total_vm_bytes: int | None = None
    anon_rss_bytes: int | None = None
    file_rss_bytes: int | None = None
    shmem_rss_bytes: int | None = None
    oom_score_adj: int | None = None
    oom_memcg: str | None = None  # the cgroup whose limit was hit
    task_memcg: str | None = None  # the victim's cgroup
    memcg_usage_bytes: int | None = None
    memcg_limit_bytes: int | None = None
    memcg_failcnt: int | None = None
    memcg_stat: dict[str, int] = field(default_factory=dict)
    mem_total_bytes: int | None = None
    free_swap_bytes: int | None = None
    total_swap_bytes: int | None = None
    manual: bool = False  # SysRq-f / moom_callback: forced, not real pressure
    reaped: bool = False  # an oom_reaper line followed for the victim
    oom_group: str | None = None
    group_killed: tuple[KilledTask, ...] = ()
    tasks: tuple[TaskRow, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    host: str | None = None  # the syslog/journal host of its lines, when their prefix names one

    @property
    def killed(self) -> bool:
        return self.victim_pid is not None

    @property
    def dead_pid(self) -> int | None:
        """The victim's pid; without a kill line (cut off, grep'd away) the selected process's."""
        return self.victim_pid if self.victim_pid is not None else self.selected_pid

    @property
    def dead_name(self) -> str | None:
        """The name that goes with :attr:`dead_pid`."""
        return self.victim_name if self.victim_pid is not None else self.selected_name


@dataclass(frozen=True)
class Victim:
    pid: int | None
    name: str | None
    role: str
    rank: int | None
    anon_rss_bytes: int | None
    file_rss_bytes: int | None
    shmem_rss_bytes: int | None
    cgroup: str | None
    evidence: tuple[Evidence, ...]
    source: str  # what told us: "kernel", "launcher", "kubernetes", ...

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "name": self.name,
            "role": self.role,
            "rank": self.rank,
            "anon_rss_bytes": self.anon_rss_bytes,
            "file_rss_bytes": self.file_rss_bytes,
            "shmem_rss_bytes": self.shmem_rss_bytes,
            "cgroup": self.cgroup,
            "source": self.source,
            "evidence": [e.to_json() for e in self.evidence],
        }


@dataclass(frozen=True)
class Observed:
    """What the agent saw itself, with no log line behind it: training processes dying of SIGKILL
    in the kernel's exit events with no OOM report for them, an OOM-kill counter that rose, memory
    short in its last samples. ``facts`` are ``agent.*`` facts for the verdict and cause rules;
    ``victims`` the processes as sampled (source "agent"); ``values`` fill placeholders of the
    verdict's summary (``{short}``, ``{others}``...); ``notes`` are added to the diagnosis's."""

    facts: Mapping[str, Any] = field(default_factory=dict)
    victims: tuple[Victim, ...] = ()
    values: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cause:
    id: str
    title: str
    confidence: float
    evidence: tuple[Evidence, ...]
    fix: str
    confirm: str
    mechanism: str = ""
    remedy: str = ""  # the fix in one line
    reasons: tuple[str, ...] = ()  # the signals that held, in words
    references: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "remedy": self.remedy,
            "confidence": self.confidence,
            "mechanism": self.mechanism,
            "reasons": list(self.reasons),
            "evidence": [e.to_json() for e in self.evidence],
            "fix": self.fix,
            "confirm": self.confirm,
            "references": list(self.references),
        }


@dataclass(frozen=True)
class InputInfo:
    """What was read from one input: counts and any limits that were hit."""

    file: str
    lines: int
    bytes: int
    truncated_lines: int = 0
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "lines": self.lines,
            "bytes": self.bytes,
            "truncated_lines": self.truncated_lines,
            "notes": list(self.notes),
        }
