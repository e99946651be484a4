"""A model projected to another scale: how much host memory one node of the job needs with R ranks, W workers
per rank and N nodes (the peak, an interval, the share by role), whether it fits a limit, how long until it
reaches it when it grows, and what each fix the causes name would change. Pure: a model in, numbers out.

Two figures per node: what the job *needs* (private sets plus the anonymous and shmem pages shared once: memory
the kernel cannot reclaim, what decides an OOM kill) and its *peak with page cache* (what a memory cgroup's
usage would show with no limit pressing on it). A limit is compared with the first.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

from oomwatch.estimate.model import EPOCH_MARKS, Model, Role
from oomwatch.estimate.steps import StepClock

SHORT_PROBE = 30.0  # seconds: a shorter run widens the interval
SHORT_WIDEN = 0.10  # by this share each side
GROWING_WIDEN = 0.15  # and a role still growing at the end, by this share of its projected growth
FIT_MARGIN = 0.05  # "fits" only with this share of the limit left; within it: "tight"


@dataclass(frozen=True)
class Scale:
    ranks: int
    workers: int  # DataLoader workers per rank
    nodes: int = 1
    seconds: float | None = None  # how long the full run is; None: as long as the probe
    steps: int | None = None  # the full run's steps, when its length was asked for in steps

    @property
    def ranks_per_node(self) -> int:
        return math.ceil(self.ranks / max(1, self.nodes))


@dataclass(frozen=True)
class Share:
    role: str
    count: int  # processes of the role on one node
    each: float  # bytes each holds at its peak (projected)
    total: float


@dataclass(frozen=True)
class Projection:
    scale: Scale
    needed: float  # bytes per node that cannot be reclaimed, at the peak
    low: float
    high: float
    with_cache: float  # plus the page cache
    shares: tuple[Share, ...]
    shared_once: float
    page_cache: float
    limit: int | None = None
    verdict: str | None = None  # "fits", "tight", "over", "unknown" (against the limit)
    seconds_to_limit: float | None = None  # when it grows past the limit during the run
    assumptions: tuple[str, ...] = ()
    step_at_limit: float | None = None  # the step it is at then, when the run printed its steps
    # it needed the limit already where the measured run's growth was read to (its last step, or its end):
    # seconds_to_limit is that moment, and the limit came then or before (the samples do not say when)
    limit_by_then: bool = False


@dataclass(frozen=True)
class WhatIf:
    cause: str  # the cause id whose fix this is
    change: str  # the fix, in words
    projection: Projection
    assumption: str = ""  # what the fix's model takes for granted

    def takes(self, broken: Projection) -> float:
        """What this mechanism holds of ``broken``'s estimate: what its fix takes off it (on its own)."""
        return max(0.0, broken.needed - self.projection.needed)

    def share(self, broken: Projection) -> float | None:
        """That, as a share of ``broken``'s estimate."""
        return self.takes(broken) / broken.needed if broken.needed > 0 else None


def coverage(slots: float, epochs: int) -> float:
    """The share of the data one of ``slots`` processes loads over ``epochs``, when each epoch deals the samples
    out at random among them (a shuffling sampler): 1 - (1 - 1/slots)^epochs."""
    return 1.0 - (1.0 - 1.0 / slots) ** max(1, epochs) if slots >= 1 else 1.0


def count(role: Role, model: Model, scale: Scale) -> int:
    if role.per in ("node", "job"):  # "job": rank 0 apart, on the first node (the one the estimate is for)
        return 1
    if role.per == "rank":  # with rank 0 apart, the others
        return max(0, scale.ranks_per_node - (1 if "rank0" in model.roles else 0))
    if role.per == "worker":
        return scale.ranks_per_node * scale.workers
    return role.seen


def _each(role: Role, model: Model, scale: Scale, steps: StepClock | None = None) -> tuple[float, float, float]:
    """(peak, low, high) bytes of one process of ``role`` over the full run (a growth goes on from the end of
    the measured run, or from its last step when its steps are known)."""
    share, curve = 1.0, None
    if role.split:  # the data they load, split among more (or fewer) of them
        # each rank's share of the data (a DistributedSampler's), and each worker's of its rank's
        measured, asked = float(model.ranks), float(max(1, scale.ranks))
        if role.role == "dataloader_worker":
            measured, asked = measured * model.workers_per_rank, asked * scale.workers
        share = coverage(asked, role.epochs) / coverage(measured, role.epochs) if asked > 0 and measured > 0 else 1.0
        if role.epochs == 1 and 0 < measured < asked:
            curve = _along_epoch(role, measured / asked)
    extra = 0.0
    if scale.seconds is not None and role.growth > 0:
        filled = _filled_later(role, model, scale, steps, share)
        if filled is not None:
            extra = filled
        else:
            extra = role.growth * share * max(0.0, scale.seconds - _grown_until(model, steps))
    widen = GROWING_WIDEN * extra if not role.settled else 0.0
    # grown by time alone (no step counter: loading or accumulating, the samples cannot tell): it may stop at once
    below = extra if steps is None else widen

    def scaled(value: float) -> float:
        return role.start + max(0.0, value - role.start) * share

    if curve is not None:  # each holds what one measured held when it had loaded that share of its data
        ratio = curve / role.peak if role.peak > 0 else 1.0
        return curve + extra, role.low * ratio + extra - below, role.high * ratio + extra + widen
    return scaled(role.peak) + extra, scaled(role.low) + extra - below, scaled(role.high) + extra + widen


def loaded(slots: float, epochs: float) -> float:
    """The share of the data one of ``slots`` processes has loaded after ``epochs`` (fractional: part of an epoch
    done), each epoch's samples dealt out at random among them: 1 - (1 - 1/slots)^k (1 - f/slots), for k whole
    epochs and a part f of the next."""
    if slots < 1 or epochs <= 0:
        return 0.0
    k = math.floor(epochs)
    return 1.0 - (1.0 - 1.0 / slots) ** k * (1.0 - (epochs - k) / slots)


def _slots(role: Role, scale: Scale) -> float:
    """Among how many of ``role`` one copy of the data is dealt out at ``scale``: a worker's share of its rank's,
    a rank's (a DistributedSampler's) or its manager's of the ranks'."""
    if role.role == "dataloader_worker":
        return float(max(1, scale.ranks) * max(1, scale.workers))
    return float(max(1, scale.ranks))


def _filled_later(role: Role, model: Model, scale: Scale, steps: StepClock | None, share: float) -> float | None:
    """What a role that fills with the samples it loads (a cache, pages un-shared one sample at a time) adds from
    the end of the measured run to the end of the full one: its rise since the first step, times how much more of
    the data it will have loaded by then (``loaded``: all of it, for a manager, once an epoch is done). None when
    it is no such role, or the epoch's steps are not known (then it grows at its rate)."""
    if not role.split or steps is None or not steps.total or scale.seconds is None:
        return None
    slots = _slots(role, scale)
    now, then = steps.last[1] / steps.total, max(0.0, steps.step_at(scale.seconds)) / steps.total
    if now <= 0 or then <= now:
        return 0.0
    base = role.at_first_step if role.at_first_step is not None else role.start
    rise = max(0.0, role.peak - base) * share
    return rise * (loaded(slots, then) / loaded(slots, now) - 1.0)


def _along_epoch(role: Role, part: float) -> float | None:
    """What one of ``role`` held when ``part`` of the first epoch was done (its data loaded that far), read off
    its curve over the epoch; None when it was not sampled then."""
    marks = role.by_epoch
    at = part * EPOCH_MARKS
    i = int(at)
    here = marks[i] if i < len(marks) else None
    if here is None or at == i:
        return here
    later = marks[i + 1] if i + 1 < len(marks) else None
    return None if later is None else here + (later - here) * (at - i)


def _per_role(
    model: Model, scale: Scale, steps: StepClock | None
) -> Iterator[tuple[str, int, tuple[float, float, float]]]:
    """Each role by name: how many of it one node holds at ``scale``, and one's (peak, low, high)."""
    for name, role in sorted(model.roles.items()):
        yield name, count(role, model, scale), _each(role, model, scale, steps)


def _needed(model: Model, scale: Scale, steps: StepClock | None) -> float:
    """What one node needs at ``scale`` (the estimate's point, without its interval)."""
    return _shared(model, scale) + sum(n * each for _, n, (each, _, _) in _per_role(model, scale, steps))


def project(model: Model, scale: Scale, limit: int | None = None, steps: StepClock | None = None) -> Projection:
    """``model`` at ``scale``, against ``limit``; ``steps``: the run's step clock (the limit is then a step too)."""
    shared = _shared(model, scale)
    shares, needed, low, high = [], shared, 0.0, 0.0
    low = high = needed
    for name, n, (each, lo, hi) in _per_role(model, scale, steps):
        shares.append(Share(name, n, each, n * each))
        needed += n * each
        low += n * max(0.0, lo)
        high += n * hi
    assumptions = list(_assumptions(model, scale, steps))
    if model.seconds < SHORT_PROBE:
        low, high = low * (1 - SHORT_WIDEN), high * (1 + SHORT_WIDEN)
    p = Projection(scale, needed, min(low, needed), max(high, needed), needed + model.page_cache, tuple(shares),
                   shared, float(model.page_cache), limit,
                   assumptions=tuple(assumptions))  # fmt: skip
    if not limit:
        return p
    p = _against(p, model, scale, steps)
    if steps is not None and p.seconds_to_limit is not None:
        p = replace(p, step_at_limit=max(0.0, steps.step_at(p.seconds_to_limit)))
    return p


def _shared(model: Model, scale: Scale) -> float:
    """Pages shared once per node; the workers' batches in shmem scaled with the workers on the node, the pages
    each rank shares with its forked workers with the ranks on the node."""
    shared = float(model.shared_unreclaimable)
    measured = model.ranks * model.workers_per_rank
    if model.batches and measured > 0:
        shared += model.batches * (scale.ranks_per_node * scale.workers / measured - 1)
    if model.families and scale.workers > 0:
        shared += model.families * (scale.ranks_per_node / model.ranks - 1)
    elif model.families:  # no workers at the larger scale: nothing is forked, nothing shared with them
        shared -= model.families
    return max(0.0, shared)


def _grown_until(model: Model, steps: StepClock | None) -> float:
    """Seconds into the run its growth was measured until: its last step when known, else its end."""
    return steps.last[0] if steps is not None else model.seconds


def _against(p: Projection, model: Model, scale: Scale, steps: StepClock | None = None) -> Projection:
    assert p.limit is not None
    until = _grown_until(model, steps)
    verdict = "over" if p.needed > p.limit else "tight" if p.high > p.limit * (1 - FIT_MARGIN) else "fits"
    if p.low <= p.limit and _by_time_alone(model, scale, steps):
        verdict = "unknown"  # what it held where the samples end fits: what came after them is not known
    rate = sum(s.count * model.roles[s.role].growth for s in p.shares)
    seconds = None
    if rate <= 0:
        pass
    elif scale.seconds is not None:  # the full run's length is known: where its own projection meets the limit
        seconds = _crossing(model, scale, steps, p.limit, until)
    elif verdict != "over":  # it fits where the samples end and grows at its rate from there
        seconds = until + (p.limit - p.needed) / rate
    return replace(p, verdict=verdict, seconds_to_limit=seconds, limit_by_then=seconds is not None and seconds <= until)


def _crossing(model: Model, scale: Scale, steps: StepClock | None, limit: int, until: float) -> float | None:
    """Seconds into the run when ``model`` at ``scale``, projected to that moment as to the run's end (a growth
    at its rate, a cache filling as the data it has loaded), first needs ``limit``: ``until`` (where its growth
    was measured to) when it needs it there already; None when it does not by the run's end. The projection
    grows with the run's length, so halving the interval finds it."""
    assert scale.seconds is not None

    def needed_at(seconds: float) -> float:
        return _needed(model, replace(scale, seconds=seconds), steps)

    end = scale.seconds
    if end <= until or needed_at(end) < limit:
        return None
    if needed_at(until) >= limit:
        return until
    lo, hi = until, end
    while hi - lo > max(1e-3, 1e-6 * end):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if needed_at(mid) >= limit else (mid, hi)
    return hi


def _by_time_alone(model: Model, scale: Scale, steps: StepClock | None) -> bool:
    """Whether growth is extended past the measured run with no training step counted: a run still loading
    (it stops) and one accumulating (it goes on) look alike then, and a job whose training had not begun when
    its samples ended (a probe of its loading) has not shown what training holds."""
    if steps is not None or scale.seconds is None or scale.seconds <= model.seconds:
        return False
    return model.rising or any(not r.settled and r.growth > 0 for r in model.roles.values())


def _assumptions(model: Model, scale: Scale, steps: StepClock | None) -> Iterator[str]:
    yield "each rank and worker at the larger scale holds what one held here (the same data, batch and model)"
    if steps is not None and scale.steps is not None and scale.seconds is not None:
        yield (f"the full run's {scale.steps} steps run at the rate measured here ({steps.rate:.3g} steps/s over "
               f"steps {steps.first[1]}–{steps.last[1]}): {scale.seconds:.0f} s from the start")  # fmt: skip
    if scale.ranks_per_node > model.ranks or scale.workers > model.workers_per_rank:
        yield "pages shared by the job's processes and the page cache stay one copy per node at the larger scale"
        if model.batches:
            yield "the workers' batches in shared memory scale with the workers on the node"
        if model.families and scale.ranks_per_node != model.ranks:
            yield "the pages each rank shares with the workers it forked are one set for each rank"
    if model.seconds < SHORT_PROBE:
        yield f"the run was sampled for {model.seconds:.0f} s only: the interval is widened"
    if any(r.split for r in model.roles.values() if r.role == "dataloader_worker") and scale.workers != round(
        model.workers_per_rank
    ):
        yield ("the workers grew with the samples they loaded (a cache of them, or large per-sample objects un-shared "
               f"from their parent), split among them: each of {scale.workers} holds {model.workers_per_rank:g}/"
               f"{scale.workers} of what one measured held beyond its start in an epoch, and over the epochs it "
               "lived through the share of the data it loaded (dealt out at random each epoch)")  # fmt: skip
    split = sorted(r.role for r in model.roles.values() if r.split)
    if split and scale.ranks != model.ranks:
        yield (f"the data each rank's {' and '.join(split)} cached is its share of the data (as a DistributedSampler "
               f"gives it): {model.ranks}/{scale.ranks} of what was measured beyond its start")  # fmt: skip
    if model.ranks == 1 and scale.ranks > 1 and "rank" in model.roles:
        yield ("measured with one rank: whether rank 0 does what the others do not (gathers their results, "
               "evaluates, saves) is not seen; a run of two ranks tells")  # fmt: skip
    zero, others = model.roles.get("rank0"), model.roles.get("rank")
    if zero is not None and others is not None:
        yield (f"rank 0 held more than the other ranks ({zero.peak / 2**20:.0f} MiB to their "
               f"{others.peak / 2**20:.0f}: what it gathers from them, evaluates or saves for the job): at the "
               "larger scale one rank 0 holds what it held here (the whole of what it gathers, split among more "
               "ranks, is the same data), the other ranks what theirs held")  # fmt: skip
    growing = [r.role for r in model.roles.values() if not r.settled]
    if growing:
        yield (f"{', '.join(sorted(growing))} still grew at the end of the run: "
               + ("the growth is extended to the full run's length" if scale.seconds is not None
                  else "give the full run's length (--duration or --steps) to extend it"))  # fmt: skip
        if scale.seconds is not None and steps is None:
            yield ("no training step was counted in the run's output, so whether it was still loading (it stops) "
                   "or accumulating (it goes on) is not known: the interval runs from what it held at the end to "
                   "its growth going on for the full run")  # fmt: skip
    yield from model.notes
