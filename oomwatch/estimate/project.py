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

from oomwatch.estimate.model import Model, Role

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
    verdict: str | None = None  # "fits", "tight", "over" (against the limit)
    seconds_to_limit: float | None = None  # when it grows past the limit during the run
    assumptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class WhatIf:
    cause: str  # the cause id whose fix this is
    change: str  # the fix, in words
    projection: Projection
    assumption: str = ""  # what the fix's model takes for granted


def count(role: Role, model: Model, scale: Scale) -> int:
    if role.per == "node":
        return 1
    if role.per == "rank":
        return scale.ranks_per_node
    if role.per == "worker":
        return scale.ranks_per_node * scale.workers
    return role.seen


def _each(role: Role, model: Model, scale: Scale) -> tuple[float, float, float]:
    """(peak, low, high) bytes of one process of ``role`` over the full run."""
    share = 1.0
    if role.split:  # the data they load, split among more (or fewer) of them
        share = model.ranks / max(1, scale.ranks)  # each rank's share of the data (a DistributedSampler's)
        if role.role == "dataloader_worker":
            share = share * model.workers_per_rank / scale.workers if scale.workers > 0 else 1.0
    extra = 0.0
    if scale.seconds is not None and role.growth > 0:
        extra = role.growth * share * max(0.0, scale.seconds - model.seconds)
    widen = GROWING_WIDEN * extra if not role.settled else 0.0

    def scaled(value: float) -> float:
        return role.start + max(0.0, value - role.start) * share

    return scaled(role.peak) + extra, scaled(role.low) + extra - widen, scaled(role.high) + extra + widen


def project(model: Model, scale: Scale, limit: int | None = None) -> Projection:
    shared = _shared(model, scale)
    shares, needed, low, high = [], shared, 0.0, 0.0
    low = high = needed
    for name, role in sorted(model.roles.items()):
        n = count(role, model, scale)
        each, lo, hi = _each(role, model, scale)
        shares.append(Share(name, n, each, n * each))
        needed += n * each
        low += n * max(0.0, lo)
        high += n * hi
    assumptions = list(_assumptions(model, scale))
    if model.seconds < SHORT_PROBE:
        low, high = low * (1 - SHORT_WIDEN), high * (1 + SHORT_WIDEN)
    p = Projection(scale, needed, min(low, needed), max(high, needed), needed + model.page_cache, tuple(shares),
                   shared, float(model.page_cache), limit,
                   assumptions=tuple(assumptions))  # fmt: skip
    return _against(p, model, scale) if limit else p


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


def _against(p: Projection, model: Model, scale: Scale) -> Projection:
    assert p.limit is not None
    verdict = "over" if p.needed > p.limit else "tight" if p.high > p.limit * (1 - FIT_MARGIN) else "fits"
    seconds = None
    rate = sum(s.count * model.roles[s.role].growth for s in p.shares)
    if verdict != "over" and rate > 0:
        at_start = p.needed - rate * max(0.0, (scale.seconds or model.seconds) - model.seconds)
        seconds = model.seconds + (p.limit - at_start) / rate if p.limit > at_start else model.seconds
        if scale.seconds is not None and seconds > scale.seconds:
            seconds = None
    elif verdict == "over" and rate > 0:
        without_growth = p.needed - rate * max(0.0, (scale.seconds or model.seconds) - model.seconds)
        if without_growth <= p.limit:
            seconds = model.seconds + (p.limit - without_growth) / rate
    return replace(p, verdict=verdict, seconds_to_limit=seconds)


def _assumptions(model: Model, scale: Scale) -> Iterator[str]:
    yield "each rank and worker at the larger scale holds what one held here (the same data, batch and model)"
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
        yield ("the workers' growth is new memory (a cache, batches in flight) for the data they load, split among "
               f"them: each of {scale.workers} holds {model.workers_per_rank:g}/{scale.workers} of what one "
               "measured held beyond its start")  # fmt: skip
    split = sorted(r.role for r in model.roles.values() if r.split)
    if split and scale.ranks != model.ranks:
        yield (f"the data each rank's {' and '.join(split)} cached is its share of the data (as a DistributedSampler "
               f"gives it): {model.ranks}/{scale.ranks} of what was measured beyond its start")  # fmt: skip
    growing = [r.role for r in model.roles.values() if not r.settled]
    if growing:
        yield (f"{', '.join(sorted(growing))} still grew at the end of the run: "
               + ("the growth is extended to the full run's length" if scale.seconds is not None
                  else "give the full run's length (--duration) to extend it"))  # fmt: skip
    yield from model.notes
