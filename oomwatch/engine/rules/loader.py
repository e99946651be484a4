"""Load rules/ (YAML data) into compiled, validated objects: the walk over a rules directory's files.

Each file's rules are parsed by their own module (fingerprints, verdict_rules, cause_rules,
activity_rules, code_rules) into one RuleSet (ruleset). Every problem found is collected as a
`RuleError` with file:line, so `oomwatch rules lint` can report them all at once. Loading never
executes anything from the files (`yaml.SafeLoader`), and patterns are compiled with the `regex` module.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import regex

from oomwatch.engine.readlimit import OversizedFile, read_text_limited
from oomwatch.engine.rules.activity_rules import parse_activity, parse_step, parse_stream
from oomwatch.engine.rules.cause_rules import parse_cause
from oomwatch.engine.rules.code_rules import CodeRule, parse_code_rule
from oomwatch.engine.rules.fingerprints import parse_fingerprint
from oomwatch.engine.rules.redos import backtracking_problems
from oomwatch.engine.rules.ruleset import (
    FAILURE_ROLES,
    FailureKind,
    RuleError,
    RuleSet,
    guarded,
    replace_or_add,
    unique_in_dir,
)
from oomwatch.engine.rules.verdict_rules import add_verdict
from oomwatch.engine.verdicts import IDS

MAX_RULES_FILE_BYTES = 4 << 20  # the largest shipped file is 40 kB; beyond this, parsing alone takes many seconds


def builtin_rules_dir() -> Path:
    """The rules shipped with oomwatch: inside the installed package, or the repo's rules/."""
    here = Path(__file__).resolve().parent.parent.parent  # oomwatch/
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
    from oomwatch.engine.rules.rules_yaml import YAMLError, parse_rules_yaml

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
    doc = _document(path, rules, "rules")
    if doc is None:
        return
    for item in doc["rules"]:
        fp = guarded(path, item, rules.errors, partial(parse_fingerprint, path, item, rules.errors))
        if fp is not None and unique_in_dir(rules, path, (fp.id, fp.name), fp.source):
            replace_or_add(rules, rules.fingerprints, fp)


def _load_verdicts(path: Path, rules: RuleSet) -> None:
    doc = _document(path, rules, "verdicts")
    if doc is None:
        return
    for item in doc["verdicts"]:
        guarded(path, item, rules.errors, partial(add_verdict, path, item, rules))


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
        parsed = guarded(path, item, rules.errors, partial(parse, item, f"{path}:{line}"))
        if parsed is None:
            continue
        rule, errs = parsed
        if rule is not None:
            errs = [*errs, *(p for pat in _patterns(rule) for p in backtracking_problems(pat.pattern, _icase(pat)))]
            rule = None if errs else rule
        rules.errors.extend(RuleError(str(path), line, e) for e in errs)
        if rule is not None and unique_in_dir(rules, path, (f"{kind}:{rule.id}",), rule.source):
            replace_or_add(rules, into, rule)


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
    _add_parsed(path, rules, doc["causes"], lambda i, src: parse_cause(i, src, IDS), rules.causes, "cause")


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
    steps = doc.get("steps") or []
    if not isinstance(steps, list):
        rules.errors.append(RuleError(str(path), 1, "`steps` must be a list of step rules"))
        steps = []
    _add_parsed(path, rules, steps, parse_step, rules.steps, "steps")
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
