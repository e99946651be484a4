"""A job's memory as a model per role, from the samples of one recorded run (a probe, a ``run --report``, the
agent's history): what each launcher, rank, DataLoader worker and manager holds privately (USS), how it
stepped up while loading and how it grows, and what the job's processes hold once for the node (pages they
share, the page cache their files fill). Pure: samples in, a model out.

What scales with what (``Role.per``): a launcher once per node; ranks with the ranks on the node; workers with
the ranks times the workers of each; a manager with the ranks when each rank had one, else as seen; anything
else as seen. Shared pages and the page cache are counted once per node, whatever the scale.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oomwatch.engine.fit import fit
from oomwatch.estimate.steps import StepClock

ROLES = ("launcher", "rank", "dataloader_worker", "manager", "other")
STEP_WINDOW = 2.0  # seconds: the steepest climb over this long is a process's step up (its load)
SETTLED_SHARE = 0.05  # growing less than this share of its private set over the last third: settled
MIN_GROWTH_POINTS = 4  # samples a growth slope is fitted over, at least
MIN_GROWTH_SPAN = 2.0  # seconds they span, at least
# anonymous memory in the job's cgroup at its first sample that no process of the job held: more, and the cgroup
# is shared with other programs (the figures are then the processes' own)
FOREIGN_ANON = 64 << 20
FILLING = 0.5  # a process still growing past this share of its life grows with the samples it loads
KNEE_RATE = 0.5  # a climb goes on back in time while it rises at least this share of its rate
ALIVE_SLACK = 1.0  # seconds: a process sampled this near the run's first step was alive then
# a training loop's first steps still add to what every later step holds: its optimizer's state (made at the
# first optimizer step), the allocator's arenas reaching the largest step's working set. Measured: a DDP rank
# that keeps nothing of its steps (scenarios' rank_leak, fixed, 2 ranks) held 236-240 MiB at step 0, 276-278 at
# step 6 and 245-295 until its end; its level once warm is read over this many steps, at most WARM_SHARE of those
# counted
WARM_STEPS = 10
WARM_SHARE = 0.1
AT_ONCE = 1e-3  # seconds: samples this near are of one tick (a process alive at the job's peak was sampled at or
# before it and at or after it: the next epoch's workers, forked just after, were not)
EPOCH_MARKS = 20  # a process's private set is kept at each 1/EPOCH_MARKS of the first epoch
# rank 0 is a role of its own when it held at least this many times the other ranks' median private set, and this
# much more (the ratio rules/causes.yaml's rank0_extra reads as job.top_rank_ratio): what it gathers, evaluates or
# saves for the job
TOP_RANK_RATIO = 1.5
TOP_RANK_EXTRA = 32 << 20


@dataclass(frozen=True)
class Point:
    """One sample of one process; sizes in bytes, None when not read."""

    time: float
    uss: int | None
    pss: int | None
    rss: int | None
    anon: int | None
    shmem: int | None = None
    rchar: int | None = None  # bytes it had read so far (read with smaps: None between readings)
    anon_peak: int | None = None  # the highest anonymous memory since the previous sample (None: not read)


@dataclass(frozen=True)
class JobPoint:
    """One sample of the job's memory cgroup (when the job has one of its own)."""

    time: float
    usage: int | None
    anon: int | None
    shmem: int | None
    file: int | None = None
    peak: int | None = None  # the highest anon + shmem since the previous sample (None: not read between samples)

    @property
    def unreclaimable(self) -> int:
        """Anon + shmem now, or the highest it reached since the previous sample when that was read."""
        now = (self.anon or 0) + (self.shmem or 0)
        return max(now, self.peak) if self.peak is not None else now


@dataclass
class Trace:
    """One process over the run."""

    pid: int
    role: str
    rank: int | None
    comm: str
    points: list[Point] = field(default_factory=list)

    def private(self) -> list[tuple[float, int]]:
        """(time, private bytes) at every sample. USS is read less often than the rest (smaps on a CPU budget):
        between readings it moves with the anonymous memory (what a process allocates is private), so each
        sample's USS is the nearest earlier reading plus the anonymous memory's change since. With no USS
        reading at all, the anonymous memory itself. At most its anonymous + shmem memory: USS also counts the
        file pages only this process maps (a lone rank's libraries), page cache that a second rank shares."""
        held = {p.time: p.anon + (p.shmem or 0) for p in self.points if p.anon is not None}
        return [(t, min(v, held.get(t, v))) for t, v in _carried(self.points, "uss", "anon")]

    def private_peaks(self) -> list[tuple[float, int]]:
        """(time, private bytes) at the highest moment since the previous sample: ``private()`` plus how far
        its anonymous memory rose above this sample's between the two (a load's transient peak, read every
        20 ms by ``oomwatch run``); ``private()`` itself where that was not read. The samples after its last
        reading of its anonymous memory that read only that highest (the process died during the tick: the
        kernel killed it; or it was exiting over two ticks, the second reading nothing) are its last private
        bytes plus how far its anonymous memory rose since, each."""
        tops = {p.time: p.anon_peak - p.anon for p in self.points
                if p.anon_peak is not None and p.anon is not None and p.anon_peak > p.anon}  # fmt: skip
        private = self.private()
        out = [(t, v + tops.get(t, 0)) for t, v in private]
        if not out:
            return out
        anon = next(p.anon for p in reversed(self.points) if p.anon is not None)
        for p in self.points:
            if p.time > out[-1][0] and p.anon is None and p.anon_peak:
                out.append((p.time, private[-1][1] + max(0, p.anon_peak - anon)))
        return out

    def held_at(self) -> set[float]:
        """When a sample read any of its memory (a process exiting during a tick may read none: it held nothing
        the job's figures of that tick can be set against)."""
        return {p.time for p in self.points if p.anon is not None or p.anon_peak}

    def proportional(self) -> list[tuple[float, int]]:
        """(time, PSS bytes) at every sample, carried between readings by the RSS's change (else the RSS)."""
        return _carried(self.points, "pss", "rss")

    def read(self) -> int | None:
        """Bytes it read from files over the run (rchar's rise between its first and last reading)."""
        reads = [p.rchar for p in self.points if p.rchar is not None]
        return max(0, reads[-1] - reads[0]) if len(reads) >= 2 else None


def _carried(points: Sequence[Point], read: str, moving: str) -> list[tuple[float, int]]:
    """Field ``read`` at every sample: its nearest earlier reading plus the change of field ``moving`` since
    (before the first reading, the first reading minus the change until it); ``moving`` itself when never read."""
    reads = [(p.time, getattr(p, read), getattr(p, moving)) for p in points
             if getattr(p, read) is not None and getattr(p, moving) is not None]  # fmt: skip
    if not reads:
        return [(p.time, getattr(p, moving)) for p in points if getattr(p, moving) is not None]
    out, i = [], 0
    for p in points:
        now = getattr(p, moving)
        if now is None:
            continue
        while i + 1 < len(reads) and reads[i + 1][0] <= p.time:
            i += 1
        _, value, then = reads[i]
        out.append((p.time, max(0, value + now - then)))
    return out


@dataclass(frozen=True)
class ProcessModel:
    pid: int
    role: str
    rank: int | None
    comm: str
    start: int  # private bytes at its first sample
    base: int  # before its steepest climb
    step: int  # its steepest climb over STEP_WINDOW seconds: what it loaded
    peak: int  # its largest private set (with what it rose to between samples, when that was read)
    last: int
    growth: float  # bytes per second over the last part of the run (0 when it did not grow)
    settled: bool  # whether it had stopped growing by the end
    at_peak: int | None = None  # its private set when the job held the most (None: not alive then)
    read: int | None = None  # bytes it read from files over the run (None: not known)
    allocated: float = 0.0  # of its private growth, the share its RSS grew by too: new memory (1), not pages
    # un-shared from a parent (copy-on-write: 0)
    filled_at: float = 0.0  # when it reached 90% of its growth, as a share of its life (0: at once, 1: at its end)
    before_growth: int = 0  # its private set when its steady growth to the end began (its level without it)
    climb_read: int | None = None  # bytes it read from its climb's start to its peak (None: not known)
    own: int | None = None  # a forked worker: what it allocated itself (beyond the pages its parent shares with it)
    per_step: float | None = None  # bytes its private set grew by each training step (None: no steps known)
    epochs: int = 1  # the run's epochs it lived through (1 when the epochs are not known)
    at_first_step: int | None = None  # its private set once the run's first step was done, less what it kept of
    # the steps after (None: not known)
    after_steps: int = 0  # what it grew by after the run's last step was counted (an evaluation that collects)
    warm: int | None = None  # the most it held over the run's first WARM_STEPS steps (at least MIN_GROWTH_POINTS
    # samples), less what it kept of each step (``_kept_per_step``): its level once its loop had warmed up (None: not
    # known)
    by_epoch: tuple[int | None, ...] = ()  # its private set as the first epoch went on: at 0, 1/EPOCH_MARKS, ...
    # of it done, as far as it was sampled (None before its first sample; empty: the epoch's steps not known)
    read_kept: int | None = None  # bytes it read and kept as it read them (None: its reads not known)
    step_rise: int | None = None  # how far its anonymous memory rose within a step above where the step left it
    # (a step's activations and gradients, freed before its line is printed; None: not read)
    anon_rise: int | None = None  # how far its anonymous memory rose from the first step on: the most it
    # allocated then (its private set rises more where it is left pages it shared; None: not known)


@dataclass(frozen=True)
class Role:
    role: str
    per: str  # "node", "rank", "worker", "job" (one: rank 0 apart), "seen": what its count scales with
    seen: int  # processes of this role in the run
    peak: float  # median private set when the job held the most (of those alive then; else of their peaks)
    low: float  # the smallest of them
    high: float  # the largest of them
    step: float  # median step up (what each loaded)
    start: float  # median private set at the first sample
    growth: float  # median growth, bytes per second
    settled: bool  # all of them had stopped growing
    # workers (or managers) that grew with the samples they loaded (a cache of them, or large per-sample objects
    # a worker un-shares): the data is split among them, so more of them each hold less of it (workers: among a
    # rank's workers; both: among the ranks, as a DistributedSampler gives each rank its share); a size reached
    # early (a buffer, or pages of small objects un-shared at once) is not split
    split: bool = False
    read: float | None = None  # median bytes each read from files over the run (None: not known)
    before_growth: float = 0.0  # median level before their steady growth to the end
    climb_read: float | None = None  # median bytes each read while climbing to its peak (None: not known)
    own: float | None = None  # workers: median memory each allocated itself (the rest of their private set is
    # pages un-shared from their parent, copy-on-write)
    per_step: float | None = None  # median growth per training step, when the run printed its steps
    epochs: int = 1  # median epochs each lived through (a worker kept over epochs holds more of the data)
    allocated: float = 0.0  # median share of their growth that was new memory (not pages un-shared)
    at_first_step: float | None = None  # median private set once the first step was done (see ProcessModel)
    after_steps: float = 0.0  # median growth after the last step was counted
    warm: float | None = None  # median level once the first steps were done (see ProcessModel)
    step_rise: float | None = None  # median rise within a step above its end (see ProcessModel)
    anon_rise: float | None = None  # median rise of their anonymous memory from the first step on (see ProcessModel)
    by_epoch: tuple[float | None, ...] = ()  # median private set as the first epoch went on (see ProcessModel)
    read_kept: float | None = None  # median bytes each read and kept as it read them (None: not known)


@dataclass(frozen=True)
class Model:
    roles: dict[str, Role]
    processes: tuple[ProcessModel, ...]
    ranks: int  # ranks seen
    workers_per_rank: float  # DataLoader workers alive together per rank (or per main process)
    shared_unreclaimable: int  # once per node: anonymous or shmem pages no single process holds privately
    page_cache: int  # once per node: the cgroup's page cache beyond the processes' own pages (reclaimable)
    measured_peak: int  # the run's peak: the cgroup's usage when it had one, else the sum of PSS
    measured_needed: int  # the run's peak of memory that cannot be reclaimed (anon + shmem)
    seconds: float  # how long the run was sampled
    basis: str  # "cgroup" or "processes": where the shared and cache figures come from
    notes: tuple[str, ...] = ()
    batches: int = 0  # of shared_unreclaimable, the shmem of the DataLoader workers' batches (scales with them)
    # of shared_unreclaimable, the anonymous pages a rank shares with the workers it forked (copy-on-write, not
    # yet un-shared): one set for each rank, so they scale with the ranks
    families: int = 0
    rising: bool = False  # the job's anon + shmem still rose over the last third of the run (see _rising)


def traces_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Trace]:
    """Traces from sample rows (``time``, ``pid``, ``role``, ``rank``, ``comm``, ``uss``, ``pss``, ``rss``,
    ``anon``, ``shmem``, and ``rchar``, ``anon_peak`` where known), the shape of history rows and of a run
    report's samples."""
    out: dict[int, Trace] = {}
    for r in sorted(rows, key=lambda r: float(r["time"])):
        pid = int(r["pid"])
        t = out.get(pid)
        if t is None:
            t = out[pid] = Trace(pid, str(r.get("role") or "unknown"), r.get("rank"), str(r.get("comm") or ""))
        role = r.get("role")
        if role and role != "unknown":  # its latest known role
            t.role = str(role)
        if r.get("rank") is not None:
            t.rank = r.get("rank")
        t.points.append(
            Point(
                float(r["time"]),
                r.get("uss"),
                r.get("pss"),
                r.get("rss"),
                r.get("anon"),
                r.get("shmem"),
                r.get("rchar"),
                r.get("anon_peak"),
            )
        )
    return list(out.values())


def role_of(trace: Trace) -> str:
    return trace.role if trace.role in ROLES else "other"


def process_model(
    trace: Trace, peak_time: float | None = None, parent: Trace | None = None, steps: StepClock | None = None
) -> ProcessModel | None:
    """One process's model; ``peak_time``: when the job held the most (its private set then is kept);
    ``parent``: a DataLoader worker's parent (the process it was forked from), when known; ``steps``: the run's
    step clock (its growth is then also per step)."""
    series = trace.private()
    if not series:
        return None
    values = [v for _, v in series]
    peak = max(values)
    # its largest private set and the one when the job held the most, with what it rose to between samples
    tops = trace.private_peaks()
    base, step = _step(series)
    # a last sample taken as it exited (its memory already going back) is not what it held: left out of the slopes
    sloped = series[:-1] if len(series) >= 3 and series[-1][1] < (1 - SETTLED_SHARE) * series[-2][1] else series
    growth, settled = _growth(sloped, peak)
    per_step = _per_step(sloped, steps) if steps is not None else None
    if steps is not None and per_step is not None:  # the growth while it stepped (not diluted by start and end)
        growth, settled = per_step * steps.rate, per_step <= 0
    at_peak = None
    if peak_time is not None and series[0][0] <= peak_time + AT_ONCE and series[-1][0] >= peak_time - AT_ONCE:
        at_peak = min(tops, key=lambda tv: abs(tv[0] - peak_time))[1]
    k = _climb_start(series)
    peak_at = series[values.index(peak)][0]
    own = _own(trace, parent, peak) if role_of(trace) == "dataloader_worker" else None
    epochs = steps.epochs_between(series[0][0] - steps.started, series[-1][0] - steps.started) if steps else 1
    anon = [(p.time, p.anon) for p in trace.points if p.anon is not None]
    kept = _kept_per_step(series, steps, per_step) if steps is not None else None
    first_step, after = _around_steps(series, steps, kept, anon) if steps is not None else (None, 0)
    by_epoch = _by_epoch(series, steps) if steps is not None else ()
    warm = _warm(series, steps, kept) if steps is not None and first_step is not None else None
    return ProcessModel(trace.pid, role_of(trace), trace.rank, trace.comm, values[0], base, step,
                        max(v for _, v in tops), values[-1],
                        growth, settled, at_peak, trace.read(), _allocated(trace, values[0], peak),
                        _filled_at(series, values[0], peak, trace), values[k],
                        _read_between(trace, series[k][0], peak_at), own, per_step, epochs, first_step,
                        after, warm, by_epoch, _read_kept(trace, series),
                        _step_rise(trace, steps) if steps is not None else None,
                        _anon_rise(anon, steps) if steps is not None else None)  # fmt: skip


def _by_epoch(series: Sequence[tuple[float, int]], steps: StepClock) -> tuple[int | None, ...]:
    """Its private set at each 1/EPOCH_MARKS of the run's first epoch done, as far as it was sampled (None at the
    marks before its first sample): what a process that loads a part of the data holds when it has loaded that
    part (interpolated between samples)."""
    done = [(steps.first_epoch_done(t - steps.started), v) for t, v in series]
    known = [(x, v) for x, v in done if x is not None]
    if len(known) < MIN_GROWTH_POINTS:
        return ()
    out: list[int | None] = []
    for i in range(EPOCH_MARKS + 1):
        mark = i / EPOCH_MARKS
        after = next((j for j, (x, _) in enumerate(known) if x >= mark), None)
        if after is None:
            break
        if known[after][0] == mark:
            out.append(known[after][1])
        elif after == 0:
            out.append(None)  # not sampled yet
        else:
            (x0, v0), (x1, v1) = known[after - 1], known[after]
            out.append(round(v0 + (v1 - v0) * (mark - x0) / (x1 - x0)))
    return tuple(out)


def _around_steps(
    series: Sequence[tuple[float, int]],
    steps: StepClock,
    per_step: float | None = None,
    anon: Sequence[tuple[float, int]] = (),
) -> tuple[int | None, int]:
    """(its private set once the run's first step was done, without what it kept of the steps after it; what it
    grew by after the last one), when it lived then. The first step's line is written when the step is done: the
    first sample after it holds that step's working set (activations, gradients, the allocator's warm-up), and
    what it kept of each step since, at ``per_step`` (``_kept_per_step``'s), is taken off (so a sample seconds
    later, as the agent's may be, still tells it, for a process that lived through the step). What it grew by
    after the last step is at most what its anonymous memory (``anon``, when sampled) grew by: memory it
    allocated, not pages left to it alone (a forked worker's exit)."""
    first = None
    done = steps.started + steps.first[0]
    after = [(t, v) for t, v in series if t >= done]
    if after and (series[0][0] <= done or after[0][0] - done <= ALIVE_SLACK):
        t, v = after[0]
        since = max(0.0, steps.counted_at(t - steps.started) - steps.first[1])
        first = max(0, int(v - (per_step or 0.0) * since))
    grew = _grew_after_steps(series, steps)
    return first, min(grew, _grew_after_steps(anon, steps)) if len(anon) >= 2 else grew


def _grew_after_steps(series: Sequence[tuple[float, int]], steps: StepClock) -> int:
    """How far ``series`` rose after the run's last step was counted (0 when not sampled on both sides of it)."""
    before = [v for t, v in series if t - steps.started <= steps.last[0]]
    later = [v for t, v in series if t - steps.started > steps.last[0]]
    return max(0, max(later) - before[-1]) if before and later else 0


def _anon_rise(anon: Sequence[tuple[float, int]], steps: StepClock) -> int | None:
    """How far its anonymous memory rose from its first sample at or after the first step's line to its highest
    after it; None when it was sampled fewer than twice then."""
    done = steps.started + steps.first[0]
    after = [v for t, v in anon if t >= done]
    return max(0, max(after) - after[0]) if len(after) >= 2 else None


def _step_rise(trace: Trace, steps: StepClock) -> int | None:
    """How far its anonymous memory rose during the run's first step above where that step left it: the highest
    read between the sample before the first step's line and the first sample at or after it (every 20 ms,
    ``anon_peak``) less that sample's. The line is printed once the step is done, its activations and gradients
    freed: every step rises this far above where it ends, and a fix that stops an accumulation leaves the steps
    as they were (the first step kept little yet). Later steps' rises are not read: what a process accumulates
    hides them (a rank keeping each step's logits ends each step higher than it rose), or is them (an evaluation
    loop gathering every batch's logits, concatenated again at each step). None when no highest was read then
    (the agent's samples)."""
    done = steps.started + steps.first[0]
    previous: float | None = None
    for p in trace.points:
        if previous is not None and previous < done <= p.time:
            if p.anon is None or p.anon_peak is None:
                return None
            return max(0, p.anon_peak - p.anon)
        previous = p.time
    return None


def _warm_window(steps: StepClock) -> float:
    """How many steps after the first a loop is still warming up: WARM_STEPS, at most WARM_SHARE of those counted."""
    return min(WARM_STEPS, WARM_SHARE * (steps.last[1] - steps.first[1]))


def _warm(series: Sequence[tuple[float, int]], steps: StepClock, per_step: float | None) -> int | None:
    """The most it held at a sample over the run's first steps (``_warm_window``), less what it kept of each step
    since the first, at ``per_step``; None when it was not sampled then (a process that lived through the first
    step was: see ``_around_steps``). A sample falls anywhere in a step, whose activations and gradients rise
    tens of MiB above where it ends: with fewer than MIN_GROWTH_POINTS samples in those steps (a loop stepping 60
    times a second, sampled every 12 steps, has one), the next ones are read too, up to half the steps counted
    (rank_leak's fixed ranks hold about 286-295 MiB each at their job's peak; one sample in the warm-up steps
    said 251-275, as low in its step as it fell)."""
    done, first = steps.started + steps.first[0], steps.first[1]
    window, half = _warm_window(steps), (steps.last[1] - first) / 2
    levels: list[float] = []
    for t, v in series:
        if t < done:
            continue
        since = max(0.0, steps.counted_at(t - steps.started) - first)
        if since > window and levels and (len(levels) >= MIN_GROWTH_POINTS or since > half):
            break
        levels.append(v - (per_step or 0.0) * since)
    return max(0, int(max(levels))) if levels else None


def _kept_per_step(series: Sequence[tuple[float, int]], steps: StepClock, per_step: float | None) -> float | None:
    """What it kept of each step, to take off its samples over the first steps (``_around_steps``, ``_warm``): the
    slope of a line through every sample past the loop's warm-up to the last step counted, when there are
    MIN_GROWTH_POINTS of them and it grew (``per_step`` > 0); else ``per_step``. ``per_step`` reads the later half
    alone (what the run goes on doing, for its projection): two or three samples there, whose slope swung from 6 to
    13 MiB a step in runs of a rank that keeps 8 MiB of logits a step (scenarios' rank_leak), and its fix's level
    with it (28 predictions: from 18.9% under to 13.9% over; through every sample past the warm-up, 17.7% under to
    9.5% over)."""
    if not per_step:
        return per_step
    first, window = steps.first[1], _warm_window(steps)
    past = [(n, float(v)) for n, v in _stepped(series, steps, steps.first[0]) if n - first > window]
    line = fit(past) if len(past) >= MIN_GROWTH_POINTS else None
    return line[0] if line is not None and line[0] > 0 else per_step


def _stepped(series: Sequence[tuple[float, int]], steps: StepClock, since: float) -> list[tuple[float, int]]:
    """(step, bytes) of its samples from ``since`` (seconds into the run) to the run's last step counted, each at
    the step counted by then (between two counted steps, the line between them): a loop's pace changes (one
    rank of two ran its first 51 steps in 1.4 s, its last 44 in 3 s), and one rate for the whole run put a sample
    at step 51 at step 32: what two-rank runs' ranks kept of each step read 6-10 MiB (counted, 9-12: what
    one-rank runs read)."""
    return [(steps.counted_at(t - steps.started), v) for t, v in series if since <= t - steps.started <= steps.last[0]]


def _per_step(series: Sequence[tuple[float, int]], steps: StepClock) -> float | None:
    """Bytes its private set grew by per step over the later half of the steps (after any warm-up), from a
    line through (step, private bytes) (with fewer than MIN_GROWTH_POINTS samples then, their ends); None when it
    was sampled fewer than twice then. Growing less than SETTLED_SHARE of its size over those steps is no growth."""
    during = _stepped(series, steps, (steps.first[0] + steps.last[0]) / 2)
    if len(during) < 2 or during[-1][0] - during[0][0] <= 0:
        return None
    if len(during) >= MIN_GROWTH_POINTS:
        line = fit([(n, float(v)) for n, v in during])
        if line is None:
            return None
        slope = line[0]
    else:  # a short run: two or three samples while it stepped, their ends
        slope = (during[-1][1] - during[0][1]) / (during[-1][0] - during[0][0])
    rise = slope * (during[-1][0] - during[0][0])
    return slope if slope > 0 and rise > SETTLED_SHARE * max(v for _, v in during) else 0.0


def _read_between(trace: Trace, start: float, end: float) -> int | None:
    """Bytes it read from ``start`` to ``end``: rchar at its first reading at or after ``end`` (its last, when none
    was that late) less at its last reading by ``start`` (its first reading, when none was that early). rchar is
    read with smaps, every few samples: the reading before a peak between them can come long before it (a rank
    loading a 292 MiB checkpoint had read 254 MiB of it at its last reading before its peak, all of it at the
    next)."""
    reads = [(p.time, p.rchar) for p in trace.points if p.rchar is not None]
    if len(reads) < 2:
        return None
    before = [r for t, r in reads if t <= start] or [reads[0][1]]
    until = [r for t, r in reads if t >= end] or [reads[-1][1]]
    return max(0, until[0] - before[-1])


def _read_kept(trace: Trace, series: Sequence[tuple[float, int]]) -> int | None:
    """Bytes it read from files and kept as it read them: over each interval between its samples, the least of
    what it read (rchar) and what its private set rose by. A dataset or checkpoint read into memory counts in
    full; imports and the framework's own allocations (little read, much allocated) and a stream read through
    (much read, little kept) count little."""
    reads = {p.time: p.rchar for p in trace.points if p.rchar is not None}
    known = [(t, v, reads[t]) for t, v in series if t in reads]
    if len(known) < 2:
        return None
    return sum(max(0, min(r1 - r0, v1 - v0)) for (_, v0, r0), (_, v1, r1) in zip(known, known[1:], strict=False))


def _own(worker: Trace, parent: Trace | None, peak: int) -> int:
    """What a forked worker allocated itself. Forked, it maps its parent's anonymous pages (shared until one of
    them writes a page): its anonymous memory beyond its parent's at its first sample is its own, the rest of
    its private set is pages it un-shared (copy-on-write). Without a known parent: its anonymous memory's rise
    over its life. Its first private reading is not its own: it comes when the worker has already un-shared
    some pages (measured from 6 to 95 MiB at its first sample, 0.2-0.6 s after the fork, in one job)."""
    anon = [(p.time, p.anon) for p in worker.points if p.anon is not None]
    if not anon:
        return 0
    first_time, first_anon = anon[0]
    top = max(a for _, a in anon)
    parents = [(p.time, p.anon) for p in parent.points if p.anon is not None] if parent is not None else []
    if parents:
        then = min(parents, key=lambda ta: abs(ta[0] - first_time))[1]
        own = max(0, top - then)
    else:
        own = max(0, top - first_anon)
    return min(own, peak)


def _median_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known else None


def _with_its_samples(m: ProcessModel) -> bool:
    """Whether it grew with the samples it loaded: still growing late in its life (past FILLING of it), as a
    cache of the data grows, or the pages of large per-sample objects a forked worker un-shares one by one.
    One that reached its size early took a buffer at its start, or un-shared pages each holding many small
    objects (touching a few of them un-shares every page): it holds that whatever its share of the data."""
    return m.peak > m.start and m.filled_at >= FILLING


def _climb_start(series: Sequence[tuple[float, int]]) -> int:
    """Where its climb to its peak started (an index of ``series``): from where it first stood halfway up, back
    while it was climbing at least half as fast as it did from there to the peak."""
    values = [v for _, v in series]
    peak_at = values.index(max(values))
    half = (values[0] + values[peak_at]) / 2
    i = next(k for k, v in enumerate(values) if v >= half)
    if i == 0 or series[peak_at][0] <= series[i - 1][0]:
        return 0
    rate = (values[peak_at] - values[i - 1]) / (series[peak_at][0] - series[i - 1][0])
    k = i - 1
    while k > 0:
        dt = series[k][0] - series[k - 1][0]
        if dt <= 0 or (values[k] - values[k - 1]) / dt < KNEE_RATE * rate:
            break
        k -= 1
    return k


def _filled_at(series: Sequence[tuple[float, int]], start: int, peak: int, trace: Trace | None = None) -> float:
    """When it reached 90% of its growth, as a share of its life. Growth its anonymous memory did not show (the
    pages a forked worker un-shares were anonymous already) is seen only when smaps is read again, on a CPU
    budget, seconds later maybe: it came at some time since the reading before, and the earliest is taken (a
    worker read late is not taken for one that grew with its samples all its life)."""
    life = series[-1][0] - series[0][0]
    if life <= 0 or peak <= start:
        return 0.0
    mark = start + 0.9 * (peak - start)
    i = next(k for k, (_, v) in enumerate(series) if v >= mark)
    reached = series[i][0]
    if trace is not None and i > 0:
        reads = [p.time for p in trace.points if p.uss is not None and p.time < reached]
        anon = {p.time: p.anon for p in trace.points if p.anon is not None}
        rose = anon.get(reached, 0) - anon.get(series[i - 1][0], 0)
        if reads and rose < (series[i][1] - series[i - 1][1]) / 2:  # a reading showed it, not the anon
            reached = max(series[0][0], reads[-1])
    return (reached - series[0][0]) / life


def _allocated(trace: Trace, start: int, peak: int) -> float:
    rss = [p.rss for p in trace.points if p.rss is not None]
    grew = peak - start
    if len(rss) < 2 or grew <= 0:
        return 0.0
    return min(1.0, max(0, max(rss) - rss[0]) / grew)


def _step(series: Sequence[tuple[float, int]]) -> tuple[int, int]:
    """(level before, size of) the steepest climb over STEP_WINDOW seconds."""
    best = (series[0][1], 0)
    j = 0
    for i, (t, v) in enumerate(series):
        while series[j][0] < t - STEP_WINDOW:
            j += 1
        low = min(value for _, value in series[j : i + 1])
        if v - low > best[1]:
            best = (low, v - low)
    return best


def _growth(series: Sequence[tuple[float, int]], peak: int) -> tuple[float, bool]:
    """Bytes per second over the second half of the run (after the load), and whether it had settled: it grew
    less than SETTLED_SHARE of its peak over the last third. Too few samples for a line through the second half
    (a short probe) is not a plateau: a series still rising at its end grows at the rate of its last third."""
    third = series[len(series) * 2 // 3 :]
    if len(third) < 2 or third[-1][1] - third[0][1] <= SETTLED_SHARE * max(peak, 1):
        return 0.0, True
    half = series[len(series) // 2 :]
    if len(half) >= MIN_GROWTH_POINTS and half[-1][0] - half[0][0] >= MIN_GROWTH_SPAN:
        line = fit([(t, float(v)) for t, v in half])
        return (max(0.0, line[0]) if line else 0.0), False
    span = third[-1][0] - third[0][0]
    return ((third[-1][1] - third[0][1]) / span if span > 0 else 0.0), False


def build(traces: Sequence[Trace], job: Sequence[JobPoint] = (), steps: StepClock | None = None) -> Model:
    """The model of one run: ``traces`` of its processes, ``job`` the samples of its own memory cgroup,
    ``steps`` its step clock when its output showed one."""
    shared, cache, peak, needed, basis, notes, peak_time, shmem = _once(traces, job)
    procs = [m for m in (process_model(t, peak_time, _parent(t, traces), steps) for t in traces) if m is not None]
    by_role: dict[str, list[ProcessModel]] = {}
    for m in procs:
        by_role.setdefault(m.role, []).append(m)
    ranks = len(by_role.get("rank", ())) or 1
    zero = _rank0_apart(by_role.get("rank", []))
    if zero is not None:
        by_role["rank"] = [m for m in by_role["rank"] if m is not zero]
        by_role["rank0"] = [zero]
    workers = _together(t for t in traces if role_of(t) == "dataloader_worker")
    roles = {name: _role(name, members, ranks) for name, members in by_role.items()}
    times = [p.time for t in traces for p in t.points]
    seconds = max(times) - min(times) if times else 0.0
    # the anonymous part of what is shared, when ranks forked workers: each rank's pages its workers still share
    families = max(0, shared - shmem) if workers else 0
    return Model(roles, tuple(procs), ranks, workers / ranks, shared, cache, peak, needed, seconds, basis, notes,
                 _batches(traces, job, shared), families, _rising(traces, job))  # fmt: skip


def _rising(traces: Sequence[Trace], job: Sequence[JobPoint]) -> bool:
    """Whether the job still rose over the last third of its samples by more than SETTLED_SHARE of its highest
    (its cgroup's anon + shmem, else its processes' summed): a run cut off while it climbed, whose processes may
    each have too few samples since their start to tell."""
    usable = [(j.time, (j.anon or 0) + (j.shmem or 0)) for j in job if j.anon is not None]
    if not usable:
        sums = _sums(traces)
        usable = [(t, v[2]) for t, v in sorted(sums.items())]
    if len(usable) < 3:
        return False
    third = usable[len(usable) * 2 // 3 :]
    top = max(v for _, v in usable)
    return max(v for _, v in third) - third[0][1] > SETTLED_SHARE * top


def _rank0_apart(ranks: Sequence[ProcessModel]) -> ProcessModel | None:
    """Rank 0, when it held far more than the other ranks (TOP_RANK_RATIO of their median, and TOP_RANK_EXTRA
    more): one process of the job does what the others do not (gathers their results, evaluates, saves)."""
    zeros = [m for m in ranks if m.rank == 0]
    others = [m.peak for m in ranks if m.rank != 0]
    if len(zeros) != 1 or not others:
        return None
    median = statistics.median(others)
    zero = zeros[0]
    return zero if zero.peak >= TOP_RANK_RATIO * median and zero.peak - median >= TOP_RANK_EXTRA else None


def _together(workers: Iterable[Trace]) -> int:
    """The most DataLoader workers alive at one time: a job's loaders (training, validation) that run one after
    the other add no workers to its peak."""
    edges = sorted(e for t in workers if t.points for e in ((t.points[0].time, 1), (t.points[-1].time, -1)))
    alive = most = 0
    for _, step in edges:  # at one time, an end (-1) before a start: one worker handing on to the next
        alive += step
        most = max(most, alive)
    return most


def _parent(trace: Trace, traces: Sequence[Trace]) -> Trace | None:
    """A DataLoader worker's parent: the one rank (or other process of the job's own) of the worker's rank, or
    the only one when the workers carry no rank."""
    if role_of(trace) != "dataloader_worker":
        return None
    mains = [t for t in traces if role_of(t) == "rank"]
    same = [t for t in mains if t.rank == trace.rank]
    if len(same) == 1:
        return same[0]
    return mains[0] if len(mains) == 1 else None


def _batches(traces: Sequence[Trace], job: Sequence[JobPoint], shared: int) -> int:
    """The shmem of the workers' batches at the job's peak (tensors a worker hands its rank through /dev/shm):
    the job cgroup's shmem then, when its DataLoader workers held shmem; at most what is shared."""
    if not any(p.shmem for t in traces if role_of(t) == "dataloader_worker" for p in t.points):
        return 0
    usable = [j for j in job if j.anon is not None]
    if not usable:
        return 0
    held = _held(traces, usable)
    top = max(usable, key=lambda j: held[j.time])
    return min(shared, top.shmem or 0)


def _role(name: str, members: list[ProcessModel], ranks: int) -> Role:
    per = {"launcher": "node", "rank": "rank", "rank0": "job", "dataloader_worker": "worker"}.get(name, "seen")
    if name == "manager" and len(members) == ranks:  # a manager for each rank (each rank builds its dataset)
        per = "rank"
    then = [m.at_peak for m in members if m.at_peak is not None] or [m.peak for m in members]
    return Role(
        role=name, per=per, seen=len(members),
        peak=float(statistics.median(then)), low=float(min(then)), high=float(max(then)),
        step=float(statistics.median(m.step for m in members)),
        start=float(statistics.median(m.start for m in members)),
        growth=float(statistics.median(m.growth for m in members)),
        settled=all(m.settled for m in members),
        split=name in ("dataloader_worker", "manager") and all(_with_its_samples(m) for m in members),
        read=_median_known(m.read for m in members),
        before_growth=float(statistics.median(m.before_growth for m in members)),
        climb_read=_median_known(m.climb_read for m in members),
        own=_median_known(m.own for m in members),
        per_step=_median_known(m.per_step for m in members),
        epochs=round(statistics.median(m.epochs for m in members)),
        allocated=float(statistics.median(m.allocated for m in members)),
        at_first_step=_median_known(m.at_first_step for m in members),
        after_steps=float(statistics.median(m.after_steps for m in members)),
        warm=_median_known(m.warm for m in members),
        step_rise=_median_known(m.step_rise for m in members),
        anon_rise=_median_known(m.anon_rise for m in members),
        by_epoch=_median_marks([m.by_epoch for m in members]),
        read_kept=_median_known(m.read_kept for m in members),
    )  # fmt: skip


def _median_marks(curves: Sequence[tuple[int | None, ...]]) -> tuple[float | None, ...]:
    """The median at each mark every one of them reached (None where none was sampled yet)."""
    reached = min((len(c) for c in curves), default=0)
    out: list[float | None] = []
    for i in range(reached):
        known = [v for c in curves if (v := c[i]) is not None]
        out.append(float(statistics.median(known)) if known else None)
    return tuple(out)


def _once(
    traces: Sequence[Trace], job: Sequence[JobPoint]
) -> tuple[int, int, int, int, str, tuple[str, ...], float | None, int]:
    """(shared unreclaimable, page cache, measured peak, measured needed, basis, notes, when the job held most,
    the shmem then).

    From the job's memory cgroup when it has one of its own: what it held beyond the processes' private sets
    (anonymous and shmem pages they share, e.g. a parent's pages its forked workers still share) and the page
    cache charged to it. A cgroup that held much anonymous memory no process of the job held at the first sample
    is shared with other programs: then the processes' own figures are used (PSS beyond USS) and the page cache
    is not known."""
    sums = _sums(traces)
    usable = sorted((j for j in job if j.usage is not None and j.anon is not None), key=lambda j: j.time)
    if usable and sums:
        first = usable[0]
        foreign = (first.anon or 0) + (first.shmem or 0) - _near(sums, first.time)[2]
        if foreign <= FOREIGN_ANON:
            held = _held(traces, usable)
            # of the samples tied at the highest, the last: its processes' USS is then read after what came
            # before it (the first one can precede a fork's first smaps reading, the pages still counted private)
            top = max(usable, key=lambda j: (held[j.time], j.time))
            needed = held[top.time]
            cache = max(max(0, (j.usage or 0) - (j.anon or 0) - (j.shmem or 0)) for j in usable)
            shared = max(0, needed - _near(sums, top.time)[0])
            return shared, cache, max(j.usage or 0 for j in usable), needed, "cgroup", (), top.time, top.shmem or 0
    if not sums:
        return 0, 0, 0, 0, "processes", ("no samples",), None, 0
    at = max(sums, key=lambda a: sums[a][1])
    uss, pss, _ = sums[at]
    note = ("the job has no memory cgroup of its own: shared pages are the sum of PSS beyond USS, and the page "
            "cache its files fill is not known",)  # fmt: skip
    # shmem a process maps is counted in each mapping's figures: the largest one's is the least there was
    shmem = max((min(t.points, key=lambda p: abs(p.time - at)).shmem or 0 for t in traces if t.points), default=0)
    return max(0, pss - uss), 0, pss, pss, "processes", note, at, shmem


def _held(traces: Sequence[Trace], job: Sequence[JobPoint]) -> dict[float, int]:
    """At each of the job's samples (sorted by time), the anon + shmem it held: at its highest since the previous
    sample, when that was read and every process alive then was still alive at this one (its processes' own
    highest are then at this sample: the job's and theirs are of the same moment); else at this sample."""
    alive: dict[float, set[int]] = {}
    for t in traces:
        for at in t.held_at():
            alive.setdefault(at, set()).add(t.pid)
    out: dict[float, int] = {}
    before: set[int] = set()
    for j in job:
        now = alive.get(j.time, set())
        out[j.time] = j.unreclaimable if before <= now else (j.anon or 0) + (j.shmem or 0)
        before = now
    return out


def _sums(traces: Sequence[Trace]) -> dict[float, tuple[int, int, int]]:
    """At each sample time: the job's (USS, PSS, anonymous + shmem) summed over its processes (USS and PSS
    carried between their readings; USS at its highest since the previous sample, as each process's peak is)."""
    sums: dict[float, list[int]] = {}
    for t in traces:
        for at, uss in t.private_peaks():
            sums.setdefault(at, [0, 0, 0])[0] += uss
        for at, pss in t.proportional():
            sums.setdefault(at, [0, 0, 0])[1] += pss
        for p in t.points:
            sums.setdefault(p.time, [0, 0, 0])[2] += (p.anon or 0) + (p.shmem or 0)
    return {at: (u, s, a) for at, (u, s, a) in sums.items()}


def _near(sums: Mapping[float, tuple[int, int, int]], at: float) -> tuple[int, int, int]:
    return sums[min(sums, key=lambda s: abs(s - at))]
