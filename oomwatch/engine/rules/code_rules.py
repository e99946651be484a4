"""Code rules (rules/code.yaml): the calls in a training script behind each mechanism.

code:
  - id: keep_in_memory                # the fact code.keep_in_memory (hits), code.keep_in_memory.value
    says: "..."                       # what a hit means, in the evidence
    match:                            # any of these matchers
      - call: [load_from_disk, load_dataset]   # callee names: `torch.load` or a last part `load`
        keyword: {keep_in_memory: true}        # the keyword is given, and true (or not knowable)
      - call: [torch.load]
        without: {mmap: true}                  # ...not given as true
      - call: [DataLoader]
        keyword_ge: {prefetch_factor: 4}       # a number at least this (captured as the value)
      - call: [torch.tensor]
        first_arg: [list]                      # list / dict / call:NAME built Python objects
      - decorator: [functools.cache, cache]     # a decorator (bare or called); keyword: as above
      - store_subscript: self                  # self.x[key] = ... (inside: the functions)
        inside: [__getitem__]
        unless_evicted: true                   # not if the class pops/clears/deletes/len()s it
      - assign: self                           # self.x = <objects> in a class having class_has
        value: [list, call:json.load]
        inside: [__init__]
        class_has: [__getitem__]
      - text: 'offload_optimizer.*cpu'         # a regex over code lines (comments removed)
    examples: {match: ["..."], no_match: ["..."]}   # snippets, parsed as a file of their own
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import regex

RULE_KEYS = {"id", "says", "match", "examples", "__line__"}
KINDS = {"call": "call", "decorator": "decorator", "store_subscript": "subscript_store", "assign": "assign_objects",
         "append_in_loop": "append_in_loop", "text": "text"}  # fmt: skip
MODIFIERS = {"keyword", "without", "keyword_ge", "first_arg", "inside", "class_has", "unless_evicted", "value",
             "names", "__line__"}  # fmt: skip


@dataclass(frozen=True)
class Matcher:
    kind: str
    calls: tuple[str, ...] = ()
    keyword: dict[str, Any] = field(default_factory=dict)
    without: dict[str, Any] = field(default_factory=dict)
    keyword_ge: dict[str, float] = field(default_factory=dict)
    first_arg: tuple[str, ...] = ()
    inside: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    class_has: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    unless_evicted: bool = False
    pattern: Any = None  # regex.Pattern[str] for kind "text"


@dataclass(frozen=True)
class CodeRule:
    id: str
    says: str
    matchers: tuple[Matcher, ...]
    match: tuple[str, ...]
    no_match: tuple[str, ...]
    source: str


def _names(raw: Any) -> tuple[str, ...]:
    return tuple(str(x) for x in raw) if isinstance(raw, list) else ((str(raw),) if raw is not None else ())


def _matcher(raw: Any, errs: list[str]) -> Matcher | None:
    if not isinstance(raw, dict):
        errs.append("each matcher must be a mapping")
        return None
    kinds = [k for k in raw if k in KINDS]
    if len(kinds) != 1:
        errs.append(f"a matcher needs exactly one of {sorted(KINDS)}")
        return None
    unknown = set(raw) - set(KINDS) - MODIFIERS
    if unknown:
        errs.append(f"unknown matcher keys {sorted(unknown)}")
        return None
    kind = kinds[0]
    pattern = None
    if kind == "text":
        if not isinstance(raw["text"], str):
            errs.append(f"text pattern must be a string, not {type(raw['text']).__name__}")
            return None
        try:
            pattern = regex.compile(raw["text"])
        except regex.error as exc:
            errs.append(f"text pattern does not compile: {exc}")
            return None
    for key in ("keyword", "without", "keyword_ge"):
        if not isinstance(raw.get(key) or {}, dict):
            errs.append(f"{key} must be a mapping of keyword names to values")
            return None
    ge: dict[str, float] = {}
    for k, v in (raw.get("keyword_ge") or {}).items():
        if k == "__line__":
            continue
        if not isinstance(v, (int, float)):
            errs.append(f"keyword_ge {k!r} needs a number")
            return None
        ge[str(k)] = float(v)
    return Matcher(
        kind=KINDS[kind],
        calls=_names(raw[kind]) if kind in ("call", "decorator", "append_in_loop") else (),
        keyword={str(k): v for k, v in (raw.get("keyword") or {}).items() if k != "__line__"},
        without={str(k): v for k, v in (raw.get("without") or {}).items() if k != "__line__"},
        keyword_ge=ge,
        first_arg=_names(raw.get("first_arg")),
        inside=_names(raw.get("inside")),
        values=_names(raw.get("value")) or (("global",) if raw.get("store_subscript") == "global" else ()),
        class_has=_names(raw.get("class_has")),
        names=_names(raw.get("names")),
        unless_evicted=bool(raw.get("unless_evicted", False)),
        pattern=pattern,
    )


def parse_code_rule(item: Any, source: str) -> tuple[CodeRule | None, list[str]]:
    if not isinstance(item, dict):
        return None, ["a code rule must be a mapping"]
    errs = [f"unknown key {k!r}" for k in sorted(set(item) - RULE_KEYS)]
    errs += [f"missing required key {k!r}" for k in ("id", "says", "match", "examples") if k not in item]
    if errs:
        return None, errs
    raw_matchers = item["match"] if isinstance(item["match"], list) else []
    if not raw_matchers:
        errs.append("`match` needs a non-empty list of matchers")
    matchers = [m for m in (_matcher(r, errs) for r in raw_matchers) if m is not None]
    examples = item["examples"] if isinstance(item["examples"], dict) else {}
    raw_match, raw_no_match = examples.get("match") or [], examples.get("no_match") or []
    if not isinstance(raw_match, list) or not isinstance(raw_no_match, list):
        errs.append("examples: `match` and `no_match` must be lists")
        raw_match, raw_no_match = [], []
    match = tuple(str(x) for x in raw_match)
    no_match = tuple(str(x) for x in raw_no_match)
    if not match:
        errs.append("at least one `match` example is needed")
    if errs:
        return None, errs
    return CodeRule(str(item["id"]), " ".join(str(item["says"]).split()), tuple(matchers), match, no_match, source), []
