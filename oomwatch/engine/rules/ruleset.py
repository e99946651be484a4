"""The RuleSet every rule file is loaded into, its errors, and how a later rule replaces an earlier one.

A rule with the same id or name as one loaded before replaces it (a user's ``--rules`` directory
overrides the built-in rules); within one directory ids and names are unique.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from oomwatch.engine.rules.activity_rules import Activity, StepRule, StreamRule
    from oomwatch.engine.rules.cause_rules import CauseRule
    from oomwatch.engine.rules.code_rules import CodeRule
    from oomwatch.engine.rules.fingerprints import Fingerprint
    from oomwatch.engine.rules.verdict_rules import VerdictRule

T = TypeVar("T")


@dataclass(frozen=True)
class RuleError:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass(frozen=True)
class FailureKind:
    """How an event kind takes part in a failure across ranks (rules/events.yaml `failures`)."""

    role: str  # "root" or "collateral"
    says: str  # "was killed by the kernel"


FAILURE_ROLES = ("root", "collateral")


@dataclass
class RuleSet:
    events: dict[str, str] = field(default_factory=dict)
    failures: dict[str, FailureKind] = field(default_factory=dict)
    fingerprints: list[Fingerprint] = field(default_factory=list)
    verdicts: list[VerdictRule] = field(default_factory=list)
    causes: list[CauseRule] = field(default_factory=list)
    activities: list[Activity] = field(default_factory=list)
    streams: list[StreamRule] = field(default_factory=list)
    steps: list[StepRule] = field(default_factory=list)
    kill_marks: set[str] = field(default_factory=set)
    code: list[CodeRule] = field(default_factory=list)
    decide: dict[str, float] = field(default_factory=lambda: {"min_confidence": 0.4, "min_lead": 0.1})
    errors: list[RuleError] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    defined: dict[str, str] = field(default_factory=dict)  # id or name -> directory, file:line
    # for each list above, where each id and name is in it: a rule replaces in constant time
    positions: dict[int, _Positions] = field(default_factory=dict, repr=False, compare=False)


def kind_of(value: Any) -> str:
    """A YAML value's kind in words, for an error message."""
    kinds = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "a number", float: "a number"}
    return kinds.get(type(value), "nothing" if value is None else type(value).__name__)


def guarded(path: Path, item: Any, errors: list[RuleError], parse: Callable[[], T]) -> T | None:
    """``parse()``, where a shape no check foresaw is still an error at the rule's line, never a traceback."""
    try:
        return parse()
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError) as exc:
        line = int(item.get("__line__", 0)) if isinstance(item, dict) else 0
        errors.append(RuleError(str(path), line, f"malformed rule ({type(exc).__name__}: {exc})"))
        return None


def unique_in_dir(rules: RuleSet, path: Path, keys: tuple[str, ...], source: str) -> bool:
    """Within one directory ids and names are unique; a later directory may override."""
    ok = True
    for key in keys:
        where = rules.defined.get(key)
        if where is not None and where.startswith(f"{path.parent}|"):
            line = int(source.rpartition(":")[2])
            rules.errors.append(RuleError(str(path), line, f"{key!r} also defined at {where[where.index('|') + 1 :]}"))
            ok = False
        rules.defined[key] = f"{path.parent}|{source}"
    return ok


def _keys(rule: Any) -> list[tuple[str, Any]]:
    keys: list[tuple[str, Any]] = [("id", rule.id)]
    if hasattr(rule, "name"):
        keys.append(("name", rule.name))
    return keys


@dataclass
class _Positions:
    """Where each id and name is in one list of rules (sorted indexes: the first one replaces)."""

    size: int = 0
    at: dict[tuple[str, Any], list[int]] = field(default_factory=dict)

    def add(self, rule: Any, i: int) -> None:
        for key in _keys(rule):
            bisect.insort(self.at.setdefault(key, []), i)


def replace_or_add(rules: RuleSet, items: list[Any], new: Any) -> None:
    """The first rule in ``items`` with ``new``'s id or name is replaced by it, else it is added.

    Each id and name is looked up, not searched for: merging n rules takes time in n, not n**2."""
    positions = rules.positions.get(id(items))
    if positions is None or positions.size != len(items):  # first use, or the list was changed elsewhere
        positions = rules.positions[id(items)] = _Positions()
        for i, rule in enumerate(items):
            positions.add(rule, i)
    found = [positions.at[key][0] for key in _keys(new) if positions.at.get(key)]
    if not found:
        positions.add(new, len(items))
        items.append(new)
    else:
        i = min(found)
        for key in _keys(items[i]):
            positions.at[key].remove(i)
        positions.add(new, i)
        items[i] = new
    positions.size = len(items)
