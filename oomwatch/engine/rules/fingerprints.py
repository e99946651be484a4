"""Fingerprints (rules/fingerprints/*.yaml): the patterns that turn a log line into an event.

Keys: id, name, description, event (a kind of rules/events.yaml), anchors (literal text every match
holds: the prefilter's), pattern, examples (match / no_match); optional: status, references, flags,
fields (constants added to every match).

Each is checked whole (keys, types, flags, the pattern compiles and cannot backtrack catastrophically,
a `match` example at least) and every problem is recorded as a RuleError with file:line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex

from oomwatch.engine.rules.redos import backtracking_problems
from oomwatch.engine.rules.ruleset import RuleError, kind_of

FINGERPRINT_KEYS = {
    "id", "name", "status", "description", "references", "event", "anchors",
    "pattern", "flags", "fields", "examples",
}  # fmt: skip
STATUSES = {"stable", "experimental", "deprecated"}

Err = Callable[..., None]  # err(message, at=line)


@dataclass(frozen=True)
class Example:
    text: str
    fields: dict[str, str]
    line: int


@dataclass(frozen=True)
class Fingerprint:
    id: str
    name: str
    status: str
    description: str
    references: tuple[str, ...]
    event: str
    anchors: tuple[str, ...]
    pattern: Any  # regex.Pattern[str]
    fields: dict[str, str]
    match: tuple[Example, ...]
    no_match: tuple[Example, ...]
    source: str  # file:line


def parse_fingerprint(path: Path, item: Any, errors: list[RuleError]) -> Fingerprint | None:
    """One fingerprint from its YAML mapping, or None (its problems appended to ``errors``)."""
    if not isinstance(item, dict):
        errors.append(RuleError(str(path), 0, "a rule must be a mapping"))
        return None
    line = int(item.get("__line__", 0))

    def err(message: str, at: int = line) -> None:
        errors.append(RuleError(str(path), at, message))

    before = len(errors)
    _check_keys(item, err)
    if len(errors) > before:
        return None
    flags, consts, references = _options(item, err)
    if len(errors) > before:
        return None
    status = str(item.get("status", "stable"))
    if status not in STATUSES:
        err(f"status must be one of {sorted(STATUSES)}, not {status!r}")
    anchors = item["anchors"]
    if not (isinstance(anchors, list) and anchors and all(isinstance(a, str) and a for a in anchors)):
        err("anchors must be a non-empty list of non-empty strings")
        anchors = []
    pattern = _compile(item["pattern"], flags, err)
    if pattern is None:
        return None
    consts = {str(k): str(v) for k, v in consts.items() if k != "__line__"}
    match, no_match = _examples(item["examples"], line, err)
    if len(errors) > before:
        return None
    return Fingerprint(
        id=str(item["id"]),
        name=str(item["name"]),
        status=status,
        description=str(item["description"]),
        references=tuple(references),
        event=str(item["event"]),
        anchors=tuple(anchors),
        pattern=pattern,
        fields=consts,
        match=match,
        no_match=no_match,
        source=f"{path}:{line}",
    )


def _check_keys(item: dict[str, Any], err: Err) -> None:
    """No unknown key, every required one."""
    for key in sorted(set(item) - FINGERPRINT_KEYS - {"__line__"}):
        err(f"unknown key {key!r}")
    for key in ("id", "name", "description", "event", "anchors", "pattern", "examples"):
        if key not in item:
            err(f"missing required key {key!r}")


def _options(item: dict[str, Any], err: Err) -> tuple[list[str], dict[str, Any], list[str]]:
    """The strings' types, then the flags, the constant fields and the references (empty when malformed)."""
    for key in ("id", "name", "description", "event", "pattern"):
        if not isinstance(item[key], str):
            err(f"{key} must be a string, not {kind_of(item[key])}")
    flags = item.get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        err(f"flags must be a list of words (known: ignorecase), not {kind_of(flags)}")
        flags = []
    consts = item.get("fields") or {}
    if not isinstance(consts, dict):
        err(f"fields must be a mapping of names to values, not {kind_of(consts)}")
        consts = {}
    elif not all(isinstance(v, (str, int, float)) for k, v in consts.items() if k != "__line__"):
        err("fields: each value must be a string or a number")
        consts = {}
    references = item.get("references") or []
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        err(f"references must be a list of strings, not {kind_of(references)}")
        references = []
    return flags, consts, references


def _compile(text: str, flags: list[str], err: Err) -> Any:
    """The compiled pattern (None when it does not compile); its backtracking problems are errors."""
    re_flags = regex.V0
    for flag in flags:
        if flag == "ignorecase":
            re_flags |= regex.IGNORECASE
        else:
            err(f"unknown flag {flag!r} (known: ignorecase)")
    try:
        pattern = regex.compile(text, re_flags)
    except regex.error as exc:
        err(f"pattern does not compile: {exc}")
        return None
    for problem in backtracking_problems(text, bool(re_flags & regex.IGNORECASE)):
        err(problem)
    return pattern


def _examples(raw: Any, line: int, err: Any) -> tuple[tuple[Example, ...], tuple[Example, ...]]:
    if not isinstance(raw, dict):
        err("examples must be a mapping with `match` and `no_match`")
        return (), ()
    at = int(raw.get("__line__", line))
    match: list[Example] = []
    raw_match, raw_no_match = raw.get("match") or [], raw.get("no_match") or []
    if not isinstance(raw_match, list) or not isinstance(raw_no_match, list):
        err("examples: `match` and `no_match` must be lists", at)
        return (), ()
    for ex in raw_match:
        if isinstance(ex, dict) and isinstance(ex.get("text"), str):
            ex_fields = ex.get("fields") or {}
            if not isinstance(ex_fields, dict):
                err(f"an example's fields must be a mapping, not {kind_of(ex_fields)}", int(ex.get("__line__", at)))
                continue
            fields = {str(k): str(v) for k, v in ex_fields.items() if k != "__line__"}
            match.append(Example(ex["text"], fields, int(ex.get("__line__", at))))
        elif isinstance(ex, str):
            match.append(Example(ex, {}, at))
        else:
            err("each match example is a string or a mapping with `text`", at)
    no_match = [Example(ex, {}, at) for ex in raw_no_match if isinstance(ex, str)]
    if not match:
        err("a rule needs at least one `match` example", at)
    return tuple(match), tuple(no_match)
