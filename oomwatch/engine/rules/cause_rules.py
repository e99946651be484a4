"""Cause rules (rules/causes.yaml): when a cause applies, how sure we are, and what to do.

    - id: keep_in_memory_duplication        # a cause id from DESIGN.md
      title: Each rank holds its own in-memory copy of the dataset
      verdicts: [host_oom, cgroup_oom]      # considered only under these verdicts
      when: {fact: hints.keep_in_memory, gt: 0}   # evidence needed to appear at all
      signals:                              # each that holds adds its weight to the confidence
        - {when: {fact: tasks.peers_count, ge: 2}, weight: 0.3, evidence: "tasks:peers",
           says: "{tasks.peers_count} processes named {victim.name} of similar size"}
      mechanism: ...                        # two or three sentences
      fix: |                                # a short code change
        ...
      confirm: ...                          # a concrete command
      references: [https://...]
      unless:                               # measurements that contradict it: the cause is dropped
        - {when: {fact: history.worker_uss_growth_bytes, lt: 8388608}, says: "the workers' USS grew < 8 MiB"}
      fallback: false                       # true: appears only when no other cause does

Evidence names: `hint:<hint>`, `event:<kind>`, `victim`, `tasks:peers`, `tasks:workers`,
`tasks:top`, `history:<topic>` (the live analyzers), `job:ranks`, `job:top_rank`, `job:outsider`,
`growth`, `activity:<id>`, `code:<id>` (engine.derived). Confidence = min(0.95, sum of the weights
of the signals that hold).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oomwatch.engine.rules.conditions import Condition, parse_condition

CAUSE_IDS = (
    "keep_in_memory_duplication", "checkpoint_load_duplication", "cow_refcount_defeat",
    "unbounded_cache", "manager_cache", "pin_memory_prefetch", "cpu_offload", "dataset_in_ram",
    "rank0_extra", "other_process", "shm_too_small", "gpu_memory_exceeded", "cuda_fragmentation",
    "unknown",
)  # fmt: skip
CAUSE_KEYS = {
    "id", "title", "remedy", "verdicts", "when", "signals", "mechanism", "fix", "confirm", "references",
    "fallback", "unless", "refines", "__line__",
}  # fmt: skip
MAX_REMEDY = 160
EVIDENCE_KINDS = (
    "hint:", "event:", "victim", "tasks:peers", "tasks:workers", "tasks:top", "history:", "job:", "growth",
    "activity:", "code:",
)  # fmt: skip
MAX_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Signal:
    when: Condition
    weight: float
    evidence: str | None
    says: str | None


@dataclass(frozen=True)
class CauseRule:
    id: str
    title: str
    remedy: str  # the fix in one line (alerts, summaries)
    verdicts: tuple[str, ...]
    when: Condition
    signals: tuple[Signal, ...]
    mechanism: str
    fix: str
    confirm: str
    references: tuple[str, ...]
    fallback: bool
    source: str
    unless: tuple[tuple[Condition, str], ...] = ()  # (condition, what it says) that rule the cause out
    # the causes this one is a special case of (keep_in_memory_duplication: dataset_in_ram): a general
    # form that scores close behind agrees with it, it is no rival when deciding whether it stands out
    refines: tuple[str, ...] = ()

    def facts(self) -> set[str]:
        names = self.when.facts()
        for sig in self.signals:
            names |= sig.when.facts()
        for cond, _ in self.unless:
            names |= cond.facts()
        return names


def parse_cause(item: Any, source: str, verdicts: tuple[str, ...]) -> tuple[CauseRule | None, list[str]]:
    """A CauseRule from YAML data, or None and the reasons why not."""
    if not isinstance(item, dict):
        return None, ["a cause rule must be a mapping"]
    errs = [f"unknown key {k!r}" for k in sorted(set(item) - CAUSE_KEYS)]
    required = ("id", "title", "remedy", "when", "mechanism", "fix", "confirm")
    errs += [f"missing required key {k!r}" for k in required if k not in item]
    if item.get("id") not in CAUSE_IDS:
        errs.append(f"id must be one of {list(CAUSE_IDS)}, not {item.get('id')!r}")
    for key in ("verdicts", "signals", "unless", "references"):
        if not isinstance(item.get(key) or [], list):
            errs.append(f"`{key}` must be a list")
    if errs:
        return None, errs
    applies = tuple(str(v) for v in item.get("verdicts") or ())
    errs += [f"unknown verdict {v!r} in `verdicts`" for v in applies if v not in verdicts]
    when, cond_errs = parse_condition(item.get("when", {}))
    errs += cond_errs
    signals = _signals(item.get("signals") or [], errs)
    unless = _unless(item.get("unless") or [], errs)
    refines = _refines(item, errs)
    remedy = " ".join(str(item.get("remedy", "")).split())
    if "remedy" in item and not 0 < len(remedy) <= MAX_REMEDY:
        errs.append(f"remedy must be one line of 1 to {MAX_REMEDY} characters (it becomes an alert's label)")
    if errs or when is None:
        return None, errs
    return (
        CauseRule(
            id=str(item["id"]),
            title=str(item["title"]),
            remedy=remedy,
            verdicts=applies,
            when=when,
            signals=tuple(signals),
            mechanism=" ".join(str(item["mechanism"]).split()),
            fix=str(item["fix"]).rstrip("\n"),
            confirm=str(item["confirm"]).strip(),
            references=tuple(str(r) for r in item.get("references") or ()),
            fallback=bool(item.get("fallback", False)),
            source=source,
            unless=tuple(unless),
            refines=tuple(refines),
        ),
        [],
    )


def _signals(raws: list[Any], errs: list[str]) -> list[Signal]:
    """Each signal's condition, weight and evidence; what is wrong is added to ``errs``."""
    signals: list[Signal] = []
    for raw in raws:
        if not isinstance(raw, dict) or "when" not in raw or "weight" not in raw:
            errs.append("each signal needs `when` and `weight`")
            continue
        cond, cond_errs = parse_condition(raw["when"])
        errs += cond_errs
        evidence = raw.get("evidence")
        if evidence is not None and not str(evidence).startswith(EVIDENCE_KINDS):
            errs.append(f"unknown evidence {evidence!r} (use one of {list(EVIDENCE_KINDS)})")
        try:
            weight = float(raw["weight"])
        except (TypeError, ValueError):
            errs.append(f"weight must be a number, not {raw['weight']!r}")
            continue
        if cond is not None:
            says = raw.get("says")
            signals.append(Signal(cond, weight, str(evidence) if evidence else None, str(says) if says else None))
    return signals


def _unless(raws: list[Any], errs: list[str]) -> list[tuple[Condition, str]]:
    """The measurements that drop the cause, each with its words; what is wrong is added to ``errs``."""
    unless: list[tuple[Condition, str]] = []
    for raw in raws:
        if not isinstance(raw, dict) or "when" not in raw or "says" not in raw:
            errs.append("each `unless` needs `when` and `says`")
            continue
        cond, cond_errs = parse_condition(raw["when"])
        errs += cond_errs
        if cond is not None:
            unless.append((cond, " ".join(str(raw["says"]).split())))
    return unless


def _refines(item: dict[str, Any], errs: list[str]) -> list[str]:
    """The cause ids this cause refines; what is wrong is added to ``errs``."""
    refines = item.get("refines") or []
    if not isinstance(refines, list) or not all(isinstance(r, str) for r in refines):
        errs.append("`refines` must be a list of cause ids")
        refines = []
    errs += [f"unknown cause {r!r} in `refines`" for r in refines if r not in CAUSE_IDS]
    if item.get("id") in refines:
        errs.append("a cause cannot refine itself")
    return refines
