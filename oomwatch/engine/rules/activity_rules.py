"""The activity vocabulary (rules/activities.yaml): what a process was doing, from the lines it
printed last; how a line says which rank printed it; which events mark the failure in a file.

    activities:
      - id: checkpoint_load                 # the fact activity.checkpoint_load
        title: loading a checkpoint          # said in evidence
        pattern: '\\bloading\\b.*\\bcheckpoint\\b'  # searched case-insensitively
        examples: {match: [...], no_match: [...]}
    streams:
      - id: bracketed
        pattern: '^\\[rank (?P<rank>\\d+)\\]'   # or `file:` to match the input's name
        examples: {match: [{text: "[rank 1] step 3", fields: {rank: "1"}}]}
    kill_marks: [sigkill, launcher_failure, ...]
    steps:
      - id: step_word                        # a training step counter: `step` captured, `total` if printed
        pattern: '\\bstep\\s*(?P<step>\\d+)(?:/(?P<total>\\d+))?'
        examples: {match: [{text: "step 3/10 loss 2.1", fields: {step: "3", total: "10"}}]}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import regex

ACTIVITY_KEYS = {"id", "title", "pattern", "examples", "__line__"}
STREAM_KEYS = {"id", "pattern", "file", "flags", "examples", "__line__"}
STEP_KEYS = {"id", "pattern", "examples", "__line__"}


@dataclass(frozen=True)
class Activity:
    id: str
    title: str
    pattern: Any  # regex.Pattern[str]
    match: tuple[str, ...]
    no_match: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class StreamRule:
    id: str
    pattern: Any  # regex.Pattern[str], searched in the line (or in the input's name when `on_file`)
    on_file: bool
    match: tuple[tuple[str, str | None], ...]  # (text, the rank it must give)
    no_match: tuple[str, ...]
    source: str

    def rank(self, text: str) -> int | None:
        m = self.pattern.search(text, timeout=0.25)
        if m is None:
            return None
        for value in m.groupdict().values():
            if value is not None and value.isdigit():
                return int(value)
        return None


@dataclass(frozen=True)
class StepRule:
    """A training loop's step counter in a line: the step it is at, the steps it counts to when printed (an
    epoch's, for a bar that starts again each epoch), and the counter's name (what precedes it, digits
    dropped: two counters in one output are told apart, a rank's prefix is not)."""

    id: str
    pattern: Any  # regex.Pattern[str] with the groups `step` and, optionally, `total`
    match: tuple[tuple[str, dict[str, str]], ...]  # (text, the fields it must give)
    no_match: tuple[str, ...]
    source: str

    def step(self, text: str) -> tuple[int, int | None, str] | None:
        """(step, total or None, the counter's name), or None when the line shows no step of this kind."""
        m = self.pattern.search(text, timeout=0.25)
        if m is None or not (m.group("step") or "").isdigit():
            return None
        groups = m.groupdict()
        total = groups.get("total")
        named = groups.get("name")
        before = named if named is not None else text[: m.start("step")]
        name = "".join(c for c in before if not c.isdigit()).strip()[-40:]
        return int(m.group("step")), int(total) if total and total.isdigit() else None, name


def _examples(raw: Any, errs: list[str]) -> tuple[list[Any], list[str]]:
    if not isinstance(raw, dict):
        errs.append("examples must be a mapping with `match` (and `no_match`)")
        return [], []
    raw_match, raw_no_match = raw.get("match") or [], raw.get("no_match") or []
    if not isinstance(raw_match, list) or not isinstance(raw_no_match, list):
        errs.append("examples: `match` and `no_match` must be lists")
        return [], []
    match = list(raw_match)
    no_match = [str(x) for x in raw_no_match if isinstance(x, str)]
    if not match:
        errs.append("at least one `match` example is needed")
    return match, no_match


def _compile(text: Any, flags: int, errs: list[str]) -> Any:
    if not isinstance(text, str):
        errs.append(f"pattern must be a string, not {type(text).__name__}")
        return None
    try:
        return regex.compile(text, flags)
    except regex.error as exc:
        errs.append(f"pattern does not compile: {exc}")
        return None


def parse_activity(item: Any, source: str) -> tuple[Activity | None, list[str]]:
    if not isinstance(item, dict):
        return None, ["an activity must be a mapping"]
    errs = [f"unknown key {k!r}" for k in sorted(set(item) - ACTIVITY_KEYS)]
    errs += [f"missing required key {k!r}" for k in ("id", "title", "pattern", "examples") if k not in item]
    if errs:
        return None, errs
    pattern = _compile(item["pattern"], regex.IGNORECASE | regex.V0, errs)
    match, no_match = _examples(item["examples"], errs)
    if errs:
        return None, errs
    texts = tuple(str(x) for x in match)
    return Activity(str(item["id"]), str(item["title"]), pattern, texts, tuple(no_match), source), []


def parse_stream(item: Any, source: str) -> tuple[StreamRule | None, list[str]]:
    if not isinstance(item, dict):
        return None, ["a stream rule must be a mapping"]
    errs = [f"unknown key {k!r}" for k in sorted(set(item) - STREAM_KEYS)]
    if "id" not in item or ("pattern" in item) == ("file" in item):
        errs.append("a stream rule needs an `id` and one of `pattern` or `file`")
    flags = regex.V0
    for flag in item.get("flags") or []:
        if flag == "ignorecase":
            flags |= regex.IGNORECASE
        else:
            errs.append(f"unknown flag {flag!r} (known: ignorecase)")
    if errs:
        return None, errs
    on_file = "file" in item
    pattern = _compile(item["file"] if on_file else item["pattern"], flags, errs)
    raw_match, no_match = _examples(item.get("examples"), errs)
    match: list[tuple[str, str | None]] = []
    for ex in raw_match:
        if isinstance(ex, dict) and isinstance(ex.get("text"), str):
            match.append((ex["text"], str((ex.get("fields") or {}).get("rank")) if ex.get("fields") else None))
        elif isinstance(ex, str):
            match.append((ex, None))
        else:
            errs.append("each match example is a string or a mapping with `text`")
    if errs:
        return None, errs
    return StreamRule(str(item["id"]), pattern, on_file, tuple(match), tuple(no_match), source), []


def parse_step(item: Any, source: str) -> tuple[StepRule | None, list[str]]:
    if not isinstance(item, dict):
        return None, ["a step rule must be a mapping"]
    errs = [f"unknown key {k!r}" for k in sorted(set(item) - STEP_KEYS)]
    errs += [f"missing required key {k!r}" for k in ("id", "pattern", "examples") if k not in item]
    if errs:
        return None, errs
    pattern = _compile(item["pattern"], regex.IGNORECASE | regex.V0, errs)
    if pattern is not None and "step" not in pattern.groupindex:
        errs.append("pattern must capture the step as (?P<step>...)")
    raw_match, no_match = _examples(item["examples"], errs)
    match: list[tuple[str, dict[str, str]]] = []
    for ex in raw_match:
        if isinstance(ex, dict) and isinstance(ex.get("text"), str) and isinstance(ex.get("fields"), dict):
            match.append((ex["text"], {str(k): str(v) for k, v in ex["fields"].items() if k != "__line__"}))
        else:
            errs.append("each match example is a mapping with `text` and the `fields` it gives (step, total)")
    if errs:
        return None, errs
    return StepRule(str(item["id"]), pattern, tuple(match), tuple(no_match), source), []


def check_step_examples(rule: StepRule, clean: Any) -> list[str]:
    problems = []
    for text, want in rule.match:
        got = rule.step(clean(text))
        fields = {} if got is None else {"step": str(got[0]), **({"total": str(got[1])} if got[1] is not None else {})}
        if got is None or any(fields.get(k) != v for k, v in want.items()):
            problems.append(f"match example gives {fields or None}, not {want}: {text!r}")
    problems += [f"no_match example matches: {t!r}" for t in rule.no_match if rule.step(clean(t)) is not None]
    return problems


def check_activity_examples(act: Activity, clean: Any) -> list[str]:
    """Problems with an activity's examples; ``clean`` turns an example into the line as scanned."""
    problems = [f"match example does not match: {t!r}" for t in act.match if not act.pattern.search(clean(t))]
    problems += [f"no_match example matches: {t!r}" for t in act.no_match if act.pattern.search(clean(t))]
    return problems


def check_stream_examples(rule: StreamRule, clean: Any) -> list[str]:
    problems = []
    for text, want in rule.match:
        got = rule.rank(text if rule.on_file else clean(text))
        if got is None or (want is not None and str(got) != want):
            problems.append(f"match example gives rank {got!r}, not {want!r}: {text!r}")
    problems += [f"no_match example matches: {t!r}" for t in rule.no_match if rule.rank(clean(t)) is not None]
    return problems
