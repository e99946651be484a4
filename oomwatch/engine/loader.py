"""Load rules/ (YAML data) into compiled, validated objects.

Every problem found is collected as a `RuleError` with file:line, so `oomwatch rules lint`
can report them all at once. Loading never executes anything from the files
(`yaml.SafeLoader`), and patterns are compiled with the `regex` module.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import regex

from oomwatch.engine.activity_rules import Activity, StreamRule, parse_activity, parse_stream
from oomwatch.engine.cause_rules import CauseRule, parse_cause
from oomwatch.engine.code_rules import CodeRule, parse_code_rule
from oomwatch.engine.conditions import Condition, parse_condition
from oomwatch.engine.readlimit import OversizedFile, read_text_limited
from oomwatch.engine.redos import backtracking_problems

T = TypeVar("T")
MAX_RULES_FILE_BYTES = 4 << 20  # the largest shipped file is 40 kB; beyond this, parsing alone takes many seconds

FINGERPRINT_KEYS = {
    "id", "name", "status", "description", "references", "event", "anchors",
    "pattern", "flags", "fields", "examples",
}  # fmt: skip
VERDICT_KEYS = {"id", "verdict", "confirmed", "when", "summary", "next_steps", "description"}
STATUSES = {"stable", "experimental", "deprecated"}
VERDICTS = (
    "host_oom", "cgroup_oom", "userspace_oom_kill", "cuda_oom", "shm_exhausted",
    "python_memory_error", "swap_thrash", "sigkill_unexplained", "other_crash",
    "no_oom_evidence",
)  # fmt: skip


@dataclass(frozen=True)
class RuleError:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


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
    kill_marks: set[str] = field(default_factory=set)
    code: list[CodeRule] = field(default_factory=list)
    decide: dict[str, float] = field(default_factory=lambda: {"min_confidence": 0.4, "min_lead": 0.1})
    errors: list[RuleError] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    defined: dict[str, str] = field(default_factory=dict)  # id or name -> directory, file:line
    # for each list above, where each id and name is in it: a rule replaces in constant time
    positions: dict[int, _Positions] = field(default_factory=dict, repr=False, compare=False)


def builtin_rules_dir() -> Path:
    """The rules shipped with oomwatch: inside the installed package, or the repo's rules/."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "rules", here.parent / "rules"):
        if (candidate / "events.yaml").is_file():
            return candidate
    raise FileNotFoundError("oomwatch's built-in rules/ directory is missing from this install")


def load_rules(extra_dirs: Iterable[Path] = ()) -> RuleSet:
    """Built-in rules, then each extra directory: a rule with the same id or name replaces."""
    rules = RuleSet()
    for directory in (builtin_rules_dir(), *extra_dirs):
        _load_dir(Path(directory), rules)
    _check_references(rules)
    return rules


def _load_dir(directory: Path, rules: RuleSet) -> None:
    if not directory.is_dir():
        rules.errors.append(RuleError(str(directory), 0, "not a directory"))
        return
    events_file = directory / "events.yaml"
    if events_file.is_file():
        doc = _read_yaml(events_file, rules)
        events = doc.get("events") if isinstance(doc, dict) else None
        if not isinstance(events, dict):
            rules.errors.append(RuleError(str(events_file), 1, "expected a mapping `events:`"))
        else:
            rules.events.update({k: str(v) for k, v in events.items() if k != "__line__"})
        if isinstance(doc, dict) and "failures" in doc:
            _load_failures(events_file, doc["failures"], rules)
    for path in sorted(directory.glob("fingerprints/*.yaml")):
        _load_fingerprints(path, rules)
    verdicts_file = directory / "verdicts.yaml"
    if verdicts_file.is_file():
        _load_verdicts(verdicts_file, rules)
    causes_file = directory / "causes.yaml"
    if causes_file.is_file():
        _load_causes(causes_file, rules)
    activities_file = directory / "activities.yaml"
    if activities_file.is_file():
        _load_activities(activities_file, rules)
    code_file = directory / "code.yaml"
    if code_file.is_file():
        _load_code(code_file, rules)


def _load_failures(path: Path, raw: Any, rules: RuleSet) -> None:
    """`failures:` kind -> {role: root|collateral, says: TEXT}."""
    if not isinstance(raw, dict):
        rules.errors.append(RuleError(str(path), 1, "`failures` must be a mapping of event kinds"))
        return
    line: int = raw.get("__line__") or 1
    for kind, item in raw.items():
        if kind == "__line__":
            continue
        where: int = item.get("__line__") or line if isinstance(item, dict) else line
        role = item.get("role") if isinstance(item, dict) else None
        says = item.get("says") if isinstance(item, dict) else None
        if role not in FAILURE_ROLES or not isinstance(says, str) or not says.strip():
            msg = f"failures: {kind!r} needs `role` ({' or '.join(FAILURE_ROLES)}) and `says` (text)"
            rules.errors.append(RuleError(str(path), where, msg))
            continue
        rules.failures[str(kind)] = FailureKind(role, " ".join(says.split()))


def _read_yaml(path: Path, rules: RuleSet) -> Any:
    from oomwatch.engine.rules_yaml import YAMLError, parse_rules_yaml

    rules.files.append(str(path))
    try:
        text = read_text_limited(path, MAX_RULES_FILE_BYTES)
        return parse_rules_yaml(text, trusted=path.resolve().is_relative_to(builtin_rules_dir()))
    except OSError as exc:
        rules.errors.append(RuleError(str(path), 0, f"cannot read: {exc.strerror or exc}"))
    except UnicodeDecodeError as exc:
        rules.errors.append(RuleError(str(path), 0, f"cannot read: not UTF-8 (byte offset {exc.start})"))
    except OversizedFile as exc:
        rules.errors.append(RuleError(str(path), 0, f"cannot read: {exc}"))
    except RecursionError:  # the loader bounds nesting: the last line of defence
        rules.errors.append(RuleError(str(path), 0, "invalid YAML: nested too deep"))
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        rules.errors.append(RuleError(str(path), line, f"invalid YAML: {problem}"))
    return None


def _load_fingerprints(path: Path, rules: RuleSet) -> None:
    doc = _read_yaml(path, rules)
    if doc is None:
        return
    items = doc.get("rules") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        rules.errors.append(RuleError(str(path), 1, "expected a list `rules:`"))
        return
    for item in items:
        fp = _guarded(path, item, rules.errors, partial(_fingerprint, path, item, rules.errors))
        if fp is not None and _unique_in_dir(rules, path, (fp.id, fp.name), fp.source):
            _replace_or_add(rules, rules.fingerprints, fp)


def _guarded(path: Path, item: Any, errors: list[RuleError], parse: Callable[[], T]) -> T | None:
    """``parse()``, where a shape no check foresaw is still an error at the rule's line, never a traceback."""
    try:
        return parse()
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError) as exc:
        line = int(item.get("__line__", 0)) if isinstance(item, dict) else 0
        errors.append(RuleError(str(path), line, f"malformed rule ({type(exc).__name__}: {exc})"))
        return None


def _unique_in_dir(rules: RuleSet, path: Path, keys: tuple[str, ...], source: str) -> bool:
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


def _replace_or_add(rules: RuleSet, items: list[Any], new: Any) -> None:
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


def _fingerprint(path: Path, item: Any, errors: list[RuleError]) -> Fingerprint | None:
    if not isinstance(item, dict):
        errors.append(RuleError(str(path), 0, "a rule must be a mapping"))
        return None
    line = int(item.get("__line__", 0))

    def err(message: str, at: int = line) -> None:
        errors.append(RuleError(str(path), at, message))

    before = len(errors)
    for key in sorted(set(item) - FINGERPRINT_KEYS - {"__line__"}):
        err(f"unknown key {key!r}")
    for key in ("id", "name", "description", "event", "anchors", "pattern", "examples"):
        if key not in item:
            err(f"missing required key {key!r}")
    if len(errors) > before:
        return None
    for key in ("id", "name", "description", "event", "pattern"):
        if not isinstance(item[key], str):
            err(f"{key} must be a string, not {_kind(item[key])}")
    flags = item.get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        err(f"flags must be a list of words (known: ignorecase), not {_kind(flags)}")
        flags = []
    consts = item.get("fields") or {}
    if not isinstance(consts, dict):
        err(f"fields must be a mapping of names to values, not {_kind(consts)}")
        consts = {}
    elif not all(isinstance(v, (str, int, float)) for k, v in consts.items() if k != "__line__"):
        err("fields: each value must be a string or a number")
        consts = {}
    references = item.get("references") or []
    if not isinstance(references, list) or not all(isinstance(r, str) for r in references):
        err(f"references must be a list of strings, not {_kind(references)}")
        references = []
    if len(errors) > before:
        return None
    status = str(item.get("status", "stable"))
    if status not in STATUSES:
        err(f"status must be one of {sorted(STATUSES)}, not {status!r}")
    anchors = item["anchors"]
    if not (isinstance(anchors, list) and anchors and all(isinstance(a, str) and a for a in anchors)):
        err("anchors must be a non-empty list of non-empty strings")
        anchors = []
    re_flags = regex.V0
    for flag in flags:
        if flag == "ignorecase":
            re_flags |= regex.IGNORECASE
        else:
            err(f"unknown flag {flag!r} (known: ignorecase)")
    try:
        pattern = regex.compile(item["pattern"], re_flags)
    except regex.error as exc:
        err(f"pattern does not compile: {exc}")
        return None
    for problem in backtracking_problems(item["pattern"], bool(re_flags & regex.IGNORECASE)):
        err(problem)
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


def _kind(value: Any) -> str:
    kinds = {dict: "a mapping", list: "a list", str: "a string", bool: "true/false", int: "a number", float: "a number"}
    return kinds.get(type(value), "nothing" if value is None else type(value).__name__)


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
                err(f"an example's fields must be a mapping, not {_kind(ex_fields)}", int(ex.get("__line__", at)))
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


def _load_verdicts(path: Path, rules: RuleSet) -> None:
    doc = _read_yaml(path, rules)
    if doc is None:
        return
    items = doc.get("verdicts") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        rules.errors.append(RuleError(str(path), 1, "expected a list `verdicts:`"))
        return
    for item in items:
        _guarded(path, item, rules.errors, partial(_add_verdict, path, item, rules))


def _add_verdict(path: Path, item: Any, rules: RuleSet) -> None:
    if not isinstance(item, dict):
        rules.errors.append(RuleError(str(path), 0, "a verdict rule must be a mapping"))
        return
    line = int(item.get("__line__", 0))
    errs = [f"unknown key {k!r}" for k in sorted(set(item) - VERDICT_KEYS - {"__line__"})]
    errs += [f"missing required key {k!r}" for k in ("id", "verdict", "when", "summary") if k not in item]
    if item.get("verdict") not in VERDICTS:
        errs.append(f"verdict must be one of {list(VERDICTS)}, not {item.get('verdict')!r}")
    cond = None
    if "when" in item:
        cond, cond_errs = parse_condition(item["when"])
        errs += cond_errs
    if not isinstance(item.get("next_steps") or [], list):
        errs.append(f"next_steps must be a list of strings, not {_kind(item['next_steps'])}")
    if not isinstance(item.get("confirmed", False), bool):
        errs.append(f"confirmed must be true or false, not {_kind(item['confirmed'])}")
    rules.errors.extend(RuleError(str(path), line, e) for e in errs)
    if errs or cond is None:
        return
    if not _unique_in_dir(rules, path, (str(item["id"]),), f"{path}:{line}"):
        return
    _replace_or_add(
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


def _document(path: Path, rules: RuleSet, key: str) -> dict[str, Any] | None:
    """The file's mapping, when it holds a list under ``key`` (else the error is recorded)."""
    doc = _read_yaml(path, rules)
    if doc is None:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        rules.errors.append(RuleError(str(path), 1, f"expected a list `{key}:`"))
        return None
    return doc


def _add_parsed(path: Path, rules: RuleSet, items: list[Any], parse: Any, into: list[Any], kind: str) -> None:
    """Parse each item (``parse(item, "file:line")`` gives the rule or None, and its errors) into ``into``."""
    for item in items:
        line = int(item.get("__line__", 0)) if isinstance(item, dict) else 0
        parsed = _guarded(path, item, rules.errors, partial(parse, item, f"{path}:{line}"))
        if parsed is None:
            continue
        rule, errs = parsed
        if rule is not None:
            errs = [*errs, *(p for pat in _patterns(rule) for p in backtracking_problems(pat.pattern, _icase(pat)))]
            rule = None if errs else rule
        rules.errors.extend(RuleError(str(path), line, e) for e in errs)
        if rule is not None and _unique_in_dir(rules, path, (f"{kind}:{rule.id}",), rule.source):
            _replace_or_add(rules, into, rule)


def _patterns(rule: Any) -> list[Any]:
    """The compiled patterns a rule searches text with (an activity's, a stream's, a code rule's `text`)."""
    if isinstance(rule, CodeRule):
        return [m.pattern for m in rule.matchers if m.pattern is not None]
    pattern = getattr(rule, "pattern", None)
    return [pattern] if pattern is not None else []


def _icase(pattern: Any) -> bool:
    return bool(pattern.flags & regex.IGNORECASE)


def _load_causes(path: Path, rules: RuleSet) -> None:
    doc = _document(path, rules, "causes")
    if doc is None:
        return
    decide = doc.get("decide")
    if decide is not None:
        keys = {k: v for k, v in decide.items() if k != "__line__"} if isinstance(decide, dict) else None
        if keys is None or set(keys) - set(rules.decide) or not all(isinstance(v, (int, float)) for v in keys.values()):
            rules.errors.append(RuleError(str(path), 1, f"`decide` takes numbers for {sorted(rules.decide)}"))
        else:
            rules.decide.update({k: float(v) for k, v in keys.items()})
    _add_parsed(path, rules, doc["causes"], lambda i, src: parse_cause(i, src, VERDICTS), rules.causes, "cause")


def _load_activities(path: Path, rules: RuleSet) -> None:
    doc = _document(path, rules, "activities")
    if doc is None:
        return
    _add_parsed(path, rules, doc["activities"], parse_activity, rules.activities, "activities")
    streams = doc.get("streams") or []
    if not isinstance(streams, list):
        rules.errors.append(RuleError(str(path), 1, "`streams` must be a list of stream rules"))
        streams = []
    _add_parsed(path, rules, streams, parse_stream, rules.streams, "streams")
    marks = doc.get("kill_marks")
    if marks is not None:
        if not isinstance(marks, list) or not all(isinstance(m, str) for m in marks):
            rules.errors.append(RuleError(str(path), 1, "`kill_marks` must be a list of event kinds"))
        else:
            rules.kill_marks = set(marks)


def _load_code(path: Path, rules: RuleSet) -> None:
    doc = _document(path, rules, "code")
    if doc is not None:
        _add_parsed(path, rules, doc["code"], parse_code_rule, rules.code, "code")


def _check_references(rules: RuleSet) -> None:
    """Cross-file checks: every fingerprint emits a known event kind, every kill mark is one."""
    for fp in rules.fingerprints:
        file, _, line = fp.source.rpartition(":")
        if fp.event not in rules.events:
            rules.errors.append(RuleError(file, int(line), f"unknown event kind {fp.event!r}"))
    for kind in sorted(set(rules.failures) - set(rules.events)):
        rules.errors.append(RuleError("events.yaml", 0, f"failures: unknown event kind {kind!r}"))
    for mark in sorted(rules.kill_marks - set(rules.events)):
        rules.errors.append(RuleError("activities.yaml", 0, f"kill_marks: unknown event kind {mark!r}"))
