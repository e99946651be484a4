"""What each fixable mechanism's fix does to a model: the model as it would be with the fix, to project like the
measured one. Each names its assumption; a cause with no fix modelled here gives nothing.

* ``keep_in_memory_duplication``, ``checkpoint_load_duplication`` (``per_rank_copy`` when only the samples show
  it): each rank's copy (what it read and kept) becomes one memory-mapped copy in the page cache, shared by
  every rank of the node (reclaimable);
* ``cow_refcount_defeat``: the workers no longer un-share the dataset's pages: each keeps what it allocated and
  the pages of the interpreter it writes anyway (at the interval's high end, all of them: a full pass of its
  garbage collector); the parent's objects shrink to their values;
* ``unbounded_cache``: the cache stops at its bound: a worker stays at its start, a rank where it stood once its
  first steps were done (else where its steady growth began; the bound's own size is not known here and is left
  out);
* ``manager_cache``: no manager cache: the manager stays at its start;
* ``pin_memory_prefetch``: fewer batches in flight: the workers' growth after their start goes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from oomwatch.engine.fit import fit
from oomwatch.estimate.model import EPOCH_MARKS, Model, Role

FIXES: dict[str, str] = {
    "keep_in_memory_duplication": "memory-mapped datasets (load_from_disk(path) without keep_in_memory=True)",
    "checkpoint_load_duplication": "memory-mapped checkpoints (torch.load(..., mmap=True))",
    "per_rank_copy": "memory-mapped data (datasets: load_from_disk(path) without keep_in_memory=True; checkpoints: "
    "torch.load(..., mmap=True))",
    "cow_refcount_defeat": "numpy / Arrow / tensor storage instead of Python objects in the dataset",
    "unbounded_cache": "a bounded cache (functools.lru_cache(maxsize=N) or none), floats instead of tensors "
    "kept across steps",
    "manager_cache": "no multiprocessing.Manager() cache",
    "pin_memory_prefetch": "a smaller prefetch_factor",
    "rank0_extra": "rank 0's extra work spread over the ranks (each rank writes its own results, metrics reduced "
    "not gathered, sharded checkpoints)",
}


def _settle(role: Role, level: float, least: float | None = None) -> Role:
    """``role`` staying at ``level`` (at ``least`` at the interval's low end, when that is lower)."""
    low = min(role.low, level, level if least is None else least)
    return replace(role, peak=level, low=low, high=level, start=min(role.start, low), growth=0.0,
                   settled=True, split=False, by_epoch=(), per_step=None)  # fmt: skip


def _less(role: Role, point: float, most: float, least: float) -> Role:
    """``role`` holding ``point`` bytes less at its peak (``most`` less at the interval's low end, ``least`` at its
    high end)."""
    low = max(0.0, role.low - most)
    return replace(role, peak=max(0.0, role.peak - point), low=low, high=max(0.0, role.high - least),
                   start=min(role.start, low))  # fmt: skip


def _shared_copy(model: Model) -> tuple[Model, str]:
    rank = model.roles.get("rank")
    if rank is None:
        return model, "no rank in this run"
    # the copy: what each rank read from files while it climbed to its peak, and kept (at most its private
    # growth); without the bytes read, its steepest climb
    grew = max(0.0, rank.peak - rank.start)
    read = rank.climb_read if rank.climb_read is not None else rank.read
    copy, how = (
        (min(grew, read), "what it read from files as it climbed to its peak, and kept")
        if read
        else (rank.step, "its steepest climb")
    )
    if copy <= 0:
        return model, "no rank loaded anything here: nothing to share"
    roles = dict(model.roles)
    for name in ("rank", "rank0"):  # rank 0 apart holds its copy too
        if (r := roles.get(name)) is not None:
            roles[name] = _less(r, copy, copy, copy)
    fixed = replace(model, roles=roles, page_cache=model.page_cache + int(copy))
    return fixed, (f"each rank's copy is {how} here ({copy / 2**20:.0f} MiB); memory-mapped, one copy stays in "
                   "the page cache, shared and reclaimable")  # fmt: skip


def _before(role: Role) -> tuple[float, float]:
    """A role's level without what it accumulates, and the least it may be: the most it held over the run's first
    steps, less what it kept of each (what it loaded and built, and its loop's warm-up, are in: model.WARM_STEPS),
    at least where it stood once the first step was done, with how far its first step rose above its end (freed
    before the step's line: model.ProcessModel.step_rise); else where its steady growth began."""
    if role.at_first_step is None:
        return role.before_growth, role.before_growth
    warm = role.warm if role.warm is not None else role.at_first_step
    return max(warm, role.at_first_step) + (role.step_rise or 0.0), role.at_first_step


def _unloaded(role: Role) -> tuple[float, str]:
    """A role's level before it had loaded any sample, and how it was found: with its curve over the first epoch
    known, where the line through its growth over the epoch's first half meets the epoch's start. Read when the
    epoch began, its first reading can come before its first batches' buffers (a worker at 9-11 MiB then, its
    line meeting the start at 15-17, in dict_cache runs of 2 workers): the line's. Read first once the epoch was
    under way, it may have loaded some already, or its fill bent since (fast, then flat): the lower of the two.
    Without the curve: its first sample."""
    marks = [(i / EPOCH_MARKS, v) for i, v in enumerate(role.by_epoch[: EPOCH_MARKS // 2 + 1]) if v is not None]
    line = fit(marks) if len(marks) >= 3 else None
    if line is not None and line[0] > 0:
        read_at_start = role.by_epoch[0] is not None
        level = line[1] if read_at_start else min(role.start, line[1])
        return max(0.0, level), "where its growth over the epoch meets the epoch's start"
    return role.start, "at its first sample's size"


def _accumulated(role: Role) -> bool:
    """With the run's steps known: did the role keep something of its steps (it grew over its later steps, or after
    its last)? A rank whose private set rose otherwise (its worker's exit leaves it the pages they shared: 99 to 206
    MiB in one dict_cache run, the cache in its worker) kept nothing a bounded cache would stop, nor did one whose
    anonymous memory rose by less than SEEN_GROWTH from the first step on (while its workers un-shared the pages
    they mapped of it, its private set rose 72 to 118 MiB over one dict_cache run, a slope of 0.2 MiB a step; its
    anonymous memory 217 to 232)."""
    grew = role.anon_rise is None or role.anon_rise >= SEEN_GROWTH
    return (grew and (role.per_step or 0.0) > 0) or role.after_steps >= SEEN_GROWTH


def _settled(levels: dict[str, str]) -> Callable[[Model], tuple[Model, str]]:
    """The fix that stops growth: each role named stays where it was before it loaded any sample ("start"), or
    where it stood before it accumulated ("before")."""

    def fix(model: Model) -> tuple[Model, str]:
        roles = dict(model.roles)
        changed = [n for n in levels if n in roles]
        said = []
        for n in changed:
            r = roles[n]
            least = None
            if levels[n] == "start":
                level, how = _unloaded(r)
            elif r.at_first_step is not None and not _accumulated(r):
                continue  # it kept nothing of its steps: the fix leaves it where it was
            else:
                level, least = _before(r)
                how = (
                    "where it stood once its first steps were done"
                    + (", with how far a step rose above that" if r.step_rise else "")
                    if r.at_first_step is not None
                    else "where its steady growth began"
                )
            # a fix never makes a process larger than it was
            roles[n] = _settle(r, min(r.peak, level), None if least is None else min(r.peak, least))
            who = "rank 0" if n == "rank0" else f"each {n}"
            said.append(f"{who} stays {how} ({min(r.peak, level) / 2**20:.0f} MiB)")
        if not changed:
            return model, f"no {' or '.join(levels)} in this run"
        if not said:
            return model, f"no {' or '.join(changed)} kept anything of its steps"
        return replace(model, roles=roles), "; ".join(said)

    return fix


VALUES_SHARE = (0.0, 0.2, 0.5)  # of a Python-object dataset's pages, what its values take in numpy/Arrow storage
# (low, point, high): CPython's int and float objects with their list slot take 32-36 bytes for an 8-byte value
# (a fifth to a quarter), a short str 57 bytes and more for its characters, a tuple or dict its header beside
# them; memory-mapped storage keeps none of it in the process, long strings keep more of their size; the samples
# cannot tell the mix
WORKER_FLOOR = 16 << 20  # bytes a forked worker un-shares of its parent's pages without touching the dataset's
# objects, before its garbage collector makes a full pass (its loop and its younger collections write some pages
# of the parent's modules and the Dataset object): measured 9 to 20 MiB in the fixed workers of four copy-on-write
# jobs (torch and Lightning, 1-4 workers); 16 MiB in bench/worker_gc_pass.py, 9 with the workers' collector off
GC_PASS = 70 << 20  # bytes more once a worker's collector makes a full pass: it writes the header of every object
# the interpreter tracks, un-sharing each page that holds one. gc.collect() at a worker's start added 60-66 MiB
# in six torch jobs (numpy storage, 3-4 workers), and 70-73 MiB came at once, seconds into their lives, in the
# fixed workers of one of them. Whether the pass comes depends on how many objects survive a worker's younger
# collections (it came in the fixed workers of 1 of 15 families): the interval's high end, not its point


def _compact_storage(model: Model) -> tuple[Model, str]:
    """numpy/Arrow storage: the workers un-share none of the dataset's pages (each keeps what it allocated
    itself, and the pages of its parent's interpreter it writes anyway: more if its garbage collector makes a
    full pass, the interval's high end), and the parent's objects (about the pages each worker un-shared of them:
    the objects it touched) shrink to their values."""
    worker = model.roles.get("dataloader_worker")
    if worker is None:
        return model, "no DataLoader worker in this run"
    allocated = worker.own if worker.own is not None else worker.start
    own = min(worker.peak, allocated + WORKER_FLOOR)
    unshared = max(0.0, worker.peak - own)
    passed = min(worker.peak, own + GC_PASS)  # a fix never makes a process larger than it was
    roles = dict(model.roles)
    roles["dataloader_worker"] = replace(_settle(worker, own), high=max(own, passed))
    said = (f"each worker keeps what it allocated itself ({allocated / 2**20:.0f} MiB) and the pages of its "
            f"parent's interpreter it writes anyway (about {WORKER_FLOOR >> 20} MiB; up to {passed / 2**20:.0f} "
            f"MiB if its garbage collector makes a full pass, which writes every object the interpreter "
            f"tracks: gc.freeze() before the workers start prevents it), un-sharing none of the dataset's "
            f"({unshared / 2**20:.0f} MiB each here)")  # fmt: skip
    rank = roles.get("rank")
    if rank is not None and unshared > 0:
        # what the parent no longer holds; at the high end, a full pass of the collector in the measured
        # workers made part of what they un-shared the interpreter's pages, not the dataset's
        most, point = (unshared * (1 - v) for v in VALUES_SHARE[:2])
        least = max(0.0, unshared - GC_PASS) * (1 - VALUES_SHARE[2])
        for name in ("rank", "rank0"):
            if (r := roles.get(name)) is not None:
                roles[name] = _less(r, point, most, least)
        said += (f"; the dataset's objects in the parent (about what a worker un-shared) shrink to their values: "
                 f"{point / 2**20:.0f} MiB less for each rank (between {least / 2**20:.0f} and {most / 2**20:.0f} "
                 "MiB: the values' own share of the objects is not known)")  # fmt: skip
    return replace(model, roles=roles), said


def _rank0_as_others(model: Model) -> tuple[Model, str]:
    """Rank 0's extra work spread over the ranks: rank 0 holds what the other ranks hold."""
    zero, others = model.roles.get("rank0"), model.roles.get("rank")
    if zero is None or others is None:
        return model, "rank 0 held no more than the other ranks here"
    roles = {n: r for n, r in model.roles.items() if n != "rank0"}
    roles["rank"] = replace(others, seen=others.seen + 1)
    return replace(model, roles=roles), (f"rank 0 holds what the other ranks held ({others.peak / 2**20:.0f} MiB), "
                                         f"not its {zero.peak / 2**20:.0f} MiB")  # fmt: skip


def _no_manager(model: Model) -> tuple[Model, str]:
    """No Manager() cache: the manager processes go."""
    if "manager" not in model.roles:
        return model, "no manager in this run"
    roles = {n: r for n, r in model.roles.items() if n != "manager"}
    return replace(model, roles=roles), "no manager process (each held its cache)"


_APPLY: dict[str, Callable[[Model], tuple[Model, str]]] = {
    "keep_in_memory_duplication": _shared_copy,
    "checkpoint_load_duplication": _shared_copy,
    "per_rank_copy": _shared_copy,
    "cow_refcount_defeat": _compact_storage,
    "unbounded_cache": _settled({"dataloader_worker": "start", "rank": "before", "rank0": "before"}),
    "manager_cache": _no_manager,
    "pin_memory_prefetch": _settled({"dataloader_worker": "start"}),
    "rank0_extra": _rank0_as_others,
}

SEEN_GROWTH = 32 << 20  # bytes a role's private set must grow by for its mechanism to be named from the samples
SEEN_COPY = 128 << 20  # bytes a rank must have read and kept as it read them for a per-rank copy (measured: the
# imports of torch and transformers, a tokenizer, 20-105 MiB; datasets and checkpoints read into memory, 230-580)
CACHE_ALLOCATED = 0.5  # a worker whose growth is at least this share new memory fills a cache


def seen_mechanisms(model: Model) -> list[str]:
    """The fixable mechanisms the samples themselves show, for a run no diagnosis named causes of (it did not
    fail): ranks that kept what they read (a per-rank copy), workers that un-shared their parent's pages
    (copy-on-write) or filled a cache, a manager that grew."""
    out = []
    rank = model.roles.get("rank")
    # what it read and kept as it read it, not what it read against all it grew by (a framework's own hundreds
    # of MiB beside a 340 MiB checkpoint hid the copy)
    if rank is not None and (rank.read_kept or 0) >= SEEN_COPY:
        out.append("per_rank_copy")
    worker = model.roles.get("dataloader_worker")
    if worker is not None and worker.peak - worker.start >= SEEN_GROWTH:
        # new memory (its RSS rose with it): a cache; else pages un-shared from its parent: copy-on-write
        out.append("unbounded_cache" if worker.allocated >= CACHE_ALLOCATED else "cow_refcount_defeat")
    manager = model.roles.get("manager")
    if manager is not None and manager.peak - manager.start >= SEEN_GROWTH:
        out.append("manager_cache")
    # a rank's own growth is named only when the run's steps are known: without them the samples cannot tell an
    # accumulation from a rank building its model and optimizer (measured: the accumulation's fix, named so, was
    # 27% under and said "fits" wrongly); with them, a rank that kept growing over its later steps, or grew after
    # its last (an evaluation collecting its outputs), keeps something of each step
    if rank is not None and rank.at_first_step is not None:
        over_steps = (rank.per_step or 0.0) > 0
        if (over_steps or rank.after_steps >= SEEN_GROWTH) and rank.peak - rank.at_first_step >= SEEN_GROWTH:
            out.append("unbounded_cache")
    if "rank0" in model.roles:  # rank 0 held far more than the other ranks (model.py: TOP_RANK_RATIO)
        out.append("rank0_extra")
    return list(dict.fromkeys(out))


def fixed_models(model: Model, causes: Iterable[str]) -> list[tuple[str, str, Model, str]]:
    """(cause, the fix in words, the model with it, the assumption) for each cause with a fix modelled here."""
    out = []
    for cause in dict.fromkeys(causes):
        apply = _APPLY.get(cause)
        if apply is None:
            continue
        fixed, assumption = apply(model)
        if fixed is not model:
            out.append((cause, FIXES[cause], fixed, assumption))
    return out
