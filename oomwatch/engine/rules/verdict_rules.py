"""Verdict rules (rules/verdicts.yaml): which verdict the facts give, first rule that holds wins.

- id: OW-V-024
  verdict: cgroup_oom          # one of engine.verdicts
  confirmed: false             # true only where the evidence itself is authoritative
  when: {fact: agent.counted_kills, gt: 0}   # a condition (engine.rules.conditions) over the facts
  summary: ...                 # a template of fact values
  next_steps: [...]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oomwatch.engine.rules.conditions import Condition, parse_condition
from oomwatch.engine.rules.ruleset import RuleError, RuleSet, kind_of, replace_or_add, unique_in_dir
from oomwatch.engine.verdicts import IDS

VERDICT_KEYS = {"id", "verdict", "confirmed", "when", "summary", "next_steps", "description"}


@dataclass(frozen=True)
class VerdictRule:
    id: str
    verdict: str
    confirmed: bool
    when: Condition
    summary: str
    next_steps: tuple[str, ...]
    source: str

    def facts(self) -> set[str]:
        return self.when.facts()


def add_verdict(path: Path, item: Any, rules: RuleSet) -> None:
    """Check one verdict rule's mapping and add it to ``rules`` (or record its errors)."""
    if not isinstance(item, dict):
        rules.errors.append(RuleError(str(path), 0, "a verdict rule must be a mapping"))
        return
    line = int(item.get("__line__", 0))
    errs = [f"unknown key {k!r}" for k in sorted(set(item) - VERDICT_KEYS - {"__line__"})]
    errs += [f"missing required key {k!r}" for k in ("id", "verdict", "when", "summary") if k not in item]
    if item.get("verdict") not in IDS:
        errs.append(f"verdict must be one of {list(IDS)}, not {item.get('verdict')!r}")
    cond = None
    if "when" in item:
        cond, cond_errs = parse_condition(item["when"])
        errs += cond_errs
    if not isinstance(item.get("next_steps") or [], list):
        errs.append(f"next_steps must be a list of strings, not {kind_of(item['next_steps'])}")
    if not isinstance(item.get("confirmed", False), bool):
        errs.append(f"confirmed must be true or false, not {kind_of(item['confirmed'])}")
    rules.errors.extend(RuleError(str(path), line, e) for e in errs)
    if errs or cond is None:
        return
    if not unique_in_dir(rules, path, (str(item["id"]),), f"{path}:{line}"):
        return
    replace_or_add(
        rules,
        rules.verdicts,
        VerdictRule(
            id=str(item["id"]),
            verdict=str(item["verdict"]),
            confirmed=bool(item.get("confirmed", False)),
            when=cond,
            summary=str(item["summary"]),
            next_steps=tuple(str(s) for s in item.get("next_steps") or ()),
            source=f"{path}:{line}",
        ),
    )
