"""Check a rule set completely and report every problem with file:line.

Beyond what loading checks: every example behaves as it says, every match example
contains an anchor (otherwise the prefilter would hide the line), no anchor is shorter than
MIN_ANCHOR bytes (a short one is in most lines: each such line is decoded and its rules tried),
and verdict rules only name known facts.
"""

from __future__ import annotations

from oomwatch.engine.code import check_code_examples
from oomwatch.engine.fact_names import hint_names, known_facts
from oomwatch.engine.fields import match_fields
from oomwatch.engine.prefix import strip_prefix
from oomwatch.engine.rules.activity_rules import check_activity_examples, check_step_examples, check_stream_examples
from oomwatch.engine.rules.fingerprints import Fingerprint
from oomwatch.engine.rules.ruleset import RuleError, RuleSet
from oomwatch.engine.text import clean_text
from oomwatch.engine.verdicts import NO_OOM_EVIDENCE

EXAMPLE_TIMEOUT = 1.0
MIN_ANCHOR = 4  # bytes (UTF-8) of an anchor at least: `-9` is in every `lr=1e-9` and kernel version


def as_scanned(text: str) -> str:
    """An example line as the scanner sees it: decoded, log prefix stripped."""
    return strip_prefix(clean_text(text.encode("utf-8", "surrogateescape"))).text


def check_examples(fp: Fingerprint) -> list[str]:
    """Problems with one fingerprint's examples, as messages (empty when all is well).

    Examples are checked the way the scanner sees lines: with the log prefix stripped."""
    problems = [
        f"anchor {a!r} is shorter than {MIN_ANCHOR} bytes: it would make most lines candidates"
        for a in fp.anchors
        if len(a.encode()) < MIN_ANCHOR
    ]
    for ex in fp.match:
        text = as_scanned(ex.text)
        if not any(a in text for a in fp.anchors):
            problems.append(f"match example contains none of the anchors {list(fp.anchors)}: {ex.text!r}")
        m = fp.pattern.search(text, timeout=EXAMPLE_TIMEOUT)
        if m is None:
            problems.append(f"match example does not match: {ex.text!r}")
            continue
        got = match_fields(fp.fields, m.groupdict())
        for key, want in ex.fields.items():
            if got.get(key) != want:
                problems.append(f"example field {key!r}: expected {want!r}, got {got.get(key)!r}: {ex.text!r}")
    for ex in fp.no_match:
        text = as_scanned(ex.text)
        if any(a in text for a in fp.anchors) and fp.pattern.search(text, timeout=EXAMPLE_TIMEOUT):
            problems.append(f"no_match example matches: {ex.text!r}")
    return problems


def lint(rules: RuleSet) -> list[RuleError]:
    errors = list(rules.errors)
    for fp in rules.fingerprints:
        file, _, line = fp.source.rpartition(":")
        try:
            problems = check_examples(fp)
        except TimeoutError:
            problems = [f"an example took more than {EXAMPLE_TIMEOUT:g} s to match: the pattern backtracks"]
        errors.extend(RuleError(file, int(line), f"{fp.id} {fp.name}: {p}") for p in problems)
    checked = [(a.source, a.id, check_activity_examples(a, as_scanned)) for a in rules.activities]
    checked += [(s.source, s.id, check_stream_examples(s, as_scanned)) for s in rules.streams]
    checked += [(s.source, s.id, check_step_examples(s, as_scanned)) for s in rules.steps]
    for source, rule_id, problems in checked:
        file, _, line = source.rpartition(":")
        errors.extend(RuleError(file, int(line), f"{rule_id}: {p}") for p in problems)
    for code in rules.code:
        file, _, line = code.source.rpartition(":")
        errors.extend(RuleError(file, int(line), f"{code.id}: {p}") for p in check_code_examples(code))
    facts = known_facts(rules.events, hint_names(rules.fingerprints), rules)
    named: list[tuple[str, str, set[str]]] = [(r.source, r.id, r.facts()) for r in rules.verdicts]
    named += [(r.source, r.id, r.facts()) for r in rules.causes]
    for source, rule_id, used in named:
        file, _, line = source.rpartition(":")
        errors.extend(RuleError(file, int(line), f"{rule_id}: unknown fact {n!r}") for n in sorted(used - facts))
    if not any(vr.verdict == NO_OOM_EVIDENCE for vr in rules.verdicts):
        errors.append(RuleError("verdicts.yaml", 0, "no rule gives `no_oom_evidence` (the fallback)"))
    return sorted(set(errors), key=lambda e: (e.file, e.line, e.message))
