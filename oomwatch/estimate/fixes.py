"""What each fixable mechanism's fix does to a model: the model as it would be with the fix, to project like the
measured one. Each names its assumption; a cause with no fix modelled here gives nothing.

* ``keep_in_memory_duplication``, ``checkpoint_load_duplication``: each rank's copy (its step up while loading)
  becomes one memory-mapped copy in the page cache, shared by every rank of the node (reclaimable);
* ``cow_refcount_defeat``: the workers no longer un-share their parent's pages: each stays at its start;
* ``unbounded_cache``: the cache stops at its bound: the growth after loading goes (the bound's own size is
  not known here and is left out);
* ``manager_cache``: no manager cache: the manager stays at its start;
* ``pin_memory_prefetch``: fewer batches in flight: the workers' growth after their start goes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from oomwatch.estimate.model import Model, Role

FIXES: dict[str, str] = {
    "keep_in_memory_duplication": "memory-mapped datasets (load_from_disk(path) without keep_in_memory=True)",
    "checkpoint_load_duplication": "memory-mapped checkpoints (torch.load(..., mmap=True))",
    "cow_refcount_defeat": "numpy / Arrow / tensor storage instead of Python objects in the dataset",
    "unbounded_cache": "a bounded cache (functools.lru_cache(maxsize=N) or none)",
    "manager_cache": "no multiprocessing.Manager() cache",
    "pin_memory_prefetch": "a smaller prefetch_factor",
}


def _settle(role: Role, level: float) -> Role:
    return replace(role, peak=level, low=min(role.low, level), high=level, growth=0.0, settled=True)


def _shared_copy(model: Model) -> tuple[Model, str]:
    rank = model.roles.get("rank")
    if rank is None:
        return model, "no rank in this run"
    # the copy: what each rank read from files and kept (its private growth, at most what it read); without
    # the bytes read, its steepest climb
    grew = max(0.0, rank.peak - rank.start)
    copy, how = (
        (min(grew, rank.read), "what it read from files and kept") if rank.read else (rank.step, "its steepest climb")
    )
    if copy <= 0:
        return model, "no rank loaded anything here: nothing to share"
    roles = dict(model.roles)
    roles["rank"] = replace(rank, peak=max(0.0, rank.peak - copy), low=max(0.0, rank.low - copy),
                            high=max(0.0, rank.high - copy))  # fmt: skip
    fixed = replace(model, roles=roles, page_cache=model.page_cache + int(copy))
    return fixed, (f"each rank's copy is {how} here ({copy / 2**20:.0f} MiB); memory-mapped, one copy stays in "
                   "the page cache, shared and reclaimable")  # fmt: skip


def _at_start(*names: str, what: str) -> Callable[[Model], tuple[Model, str]]:
    def fix(model: Model) -> tuple[Model, str]:
        roles = dict(model.roles)
        changed = [n for n in names if n in roles]
        for n in changed:
            roles[n] = _settle(roles[n], roles[n].start if what == "start" else roles[n].start + roles[n].step)
        if not changed:
            return model, f"no {' or '.join(names)} in this run"
        said = "stays at its first sample's size" if what == "start" else "stops growing after it loaded"
        return replace(model, roles=roles), f"each {', '.join(changed)} {said}"

    return fix


_APPLY: dict[str, Callable[[Model], tuple[Model, str]]] = {
    "keep_in_memory_duplication": _shared_copy,
    "checkpoint_load_duplication": _shared_copy,
    "cow_refcount_defeat": _at_start("dataloader_worker", what="start"),
    "unbounded_cache": _at_start("dataloader_worker", "rank", what="loaded"),
    "manager_cache": _at_start("manager", what="start"),
    "pin_memory_prefetch": _at_start("dataloader_worker", what="start"),
}


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
