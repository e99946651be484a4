"""What one agent tick saw: frozen values, no I/O. Sizes are bytes; None means "not known"
(a missing file, a field an old kernel lacks, a value not sampled yet), never zero."""

from __future__ import annotations

from dataclasses import dataclass, field

from oomwatch.procfs.pressure import Pressure

TRAINING_ROLES = frozenset({"launcher", "rank", "dataloader_worker", "manager", "unknown"})


@dataclass(frozen=True)
class ProcessSample:
    pid: int
    ppid: int
    comm: str
    role: str
    job: str | None
    rank: int | None
    local_rank: int | None
    state: str | None  # "R", "S", "D", "Z"...; a zombie has no memory figures
    rss: int | None
    anon: int | None
    file: int | None
    shmem: int | None
    swap: int | None
    hwm: int | None  # VmHWM: the peak RSS since the process started
    # From smaps_rollup, on a CPU budget (see agent.pss): None until first read.
    pss: int | None = None
    uss: int | None = None
    swap_pss: int | None = None
    smaps_time: float | None = None  # when the smaps values above were read (wall clock, epoch seconds)
    rchar: int | None = None  # bytes it had read (/proc/PID/io), read with smaps
    cgroup: str | None = None  # the memory cgroup's path inside its hierarchy
    gpu_memory: int | None = None
    start_time: int | None = None  # clock ticks after boot (/proc/PID/stat): with the pid, one process in a boot
    # the highest anonymous memory read between the tick before and this one (agent.peaks, every 20 ms while its
    # job is in its first steps), this tick's own reading included; None when it was not read between ticks
    anon_peak: int | None = None

    def smaps_age(self, now: float) -> float | None:
        """Seconds since the smaps values were read, at wall-clock time ``now`` (a tick's ``time``)."""
        return None if self.smaps_time is None else max(0.0, now - self.smaps_time)

    @property
    def in_job(self) -> bool:
        return self.job is not None and self.role in TRAINING_ROLES


@dataclass(frozen=True)
class CgroupSample:
    path: str  # as /proc/PID/cgroup names it, e.g. /kubepods/burstable/pod.../cid
    version: int | None
    usage: int | None
    limit: int | None  # this cgroup's own limit; None = unlimited
    effective_limit: int | None  # the smallest limit of it and its ancestors; None = unlimited
    peak: int | None
    anon: int | None
    file: int | None
    shmem: int | None
    swap: int | None
    oom_kills: int | None
    pressure: Pressure | None
    jobs: tuple[str, ...] = ()
    unreclaimable_peak: int | None = None  # the highest anon + shmem read since the tick before (as anon_peak)


@dataclass(frozen=True)
class NodeSample:
    mem_total: int | None
    mem_available: int | None
    swap_total: int | None
    swap_free: int | None
    oom_kills: int | None  # /proc/vmstat oom_kill (Linux 4.13+)
    pressure: Pressure | None


@dataclass(frozen=True)
class GpuSample:
    index: int
    uuid: str
    name: str
    used: int | None
    total: int | None


@dataclass(frozen=True)
class CollectorResult:
    name: str  # processes, smaps, cgroups, node, gpu
    ok: bool
    duration: float  # seconds
    error: str | None = None


@dataclass(frozen=True)
class StepMark:
    """A job's step counter as its output showed it in a tick (agent.steps): which counter (the step rule, its
    name, what it counts to) and the step it showed."""

    time: float
    job: str
    rule: str
    name: str
    total: int | None
    step: int


@dataclass(frozen=True)
class Tick:
    time: float  # wall clock, seconds since the epoch
    duration: float  # seconds the whole tick took
    processes: tuple[ProcessSample, ...]
    cgroups: tuple[CgroupSample, ...] = ()
    node: NodeSample | None = None
    gpus: tuple[GpuSample, ...] = ()
    collectors: tuple[CollectorResult, ...] = ()
    smaps_spent: float = 0.0  # CPU seconds spent reading smaps_rollup in this tick
    notices: tuple[str, ...] = field(default_factory=tuple)  # new this tick (each said once)
    steps: tuple[StepMark, ...] = ()  # the jobs' step counters their output showed since the last tick

    def jobs(self) -> dict[str, list[ProcessSample]]:
        out: dict[str, list[ProcessSample]] = {}
        for p in self.processes:
            if p.in_job and p.job is not None:
                out.setdefault(p.job, []).append(p)
        return out
