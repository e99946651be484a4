"""The small condition language of verdict (and later cause) rules.

A condition is data, never code:

    {fact: kernel.global_kills, gt: 0}          # comparison: eq ne gt ge lt le in
    {fact: victim.role, eq: dataloader_worker}
    {fact: log.has_kernel_log, is: true}        # is: true | false | null
    {all: [cond, ...]}   {any: [cond, ...]}   {not: cond}

Facts are looked up by name in a plain dict; a missing fact is None, and a comparison
with None is false (except `is: null`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPS = ("eq", "ne", "gt", "ge", "lt", "le", "in", "is")


@dataclass(frozen=True)
class Condition:
    kind: str  # "cmp", "all", "any", "not"
    fact: str = ""
    op: str = ""
    value: Any = None
    children: tuple[Condition, ...] = ()

    def facts(self) -> set[str]:
        """Every fact name this condition reads (lint checks they exist)."""
        names = {self.fact} if self.kind == "cmp" else set()
        for child in self.children:
            names |= child.facts()
        return names

    def evaluate(self, facts: Mapping[str, Any]) -> bool:
        if self.kind == "all":
            return all(c.evaluate(facts) for c in self.children)
        if self.kind == "any":
            return any(c.evaluate(facts) for c in self.children)
        if self.kind == "not":
            return not self.children[0].evaluate(facts)
        return _compare(facts.get(self.fact), self.op, self.value)


def _compare(actual: Any, op: str, expected: Any) -> bool:
    if op == "is":
        return actual is expected or (expected is None and actual is None)
    if actual is None:
        return False
    if op == "eq":
        return bool(actual == expected)
    if op == "ne":
        return bool(actual != expected)
    if op == "in":
        return actual in expected
    try:
        if op == "gt":
            return bool(actual > expected)
        if op == "ge":
            return bool(actual >= expected)
        if op == "lt":
            return bool(actual < expected)
        if op == "le":
            return bool(actual <= expected)
    except TypeError:
        return False
    return False


def parse_condition(raw: Any) -> tuple[Condition | None, list[str]]:
    """Parse YAML data into a Condition; errors are returned, never raised."""
    if not isinstance(raw, dict):
        return None, [f"a condition must be a mapping, not {type(raw).__name__}"]
    keys = set(raw) - {"__line__"}
    for group in ("all", "any"):
        if keys == {group}:
            items = raw[group]
            if not isinstance(items, list) or not items:
                return None, [f"`{group}` needs a non-empty list of conditions"]
            parsed = [parse_condition(item) for item in items]
            errors = [e for _, errs in parsed for e in errs]
            children = tuple(c for c, _ in parsed if c is not None)
            return (Condition(group, children=children) if not errors else None), errors
    if keys == {"not"}:
        child, errors = parse_condition(raw["not"])
        return (Condition("not", children=(child,)) if child else None), errors
    if "fact" in keys:
        ops = keys - {"fact"}
        if len(ops) != 1 or next(iter(ops)) not in OPS:
            return None, [f"condition on {raw.get('fact')!r} needs exactly one of {list(OPS)}"]
        op = next(iter(ops))
        value = raw[op]
        if op == "in" and not isinstance(value, list):
            return None, ["`in` needs a list"]
        if op == "is" and value not in (True, False, None):
            return None, ["`is` takes true, false or null"]
        return Condition("cmp", fact=str(raw["fact"]), op=op, value=value), []
    return None, [f"unknown condition keys {sorted(keys)} (use fact/all/any/not)"]
