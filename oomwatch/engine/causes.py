"""Rank the causes that the evidence supports (rules/causes.yaml decides; this evaluates).

A cause appears only when its `when` holds over the facts; its confidence is the sum of the
weights of its signals that hold (capped); its evidence is the lines those signals name.
A `fallback` cause (unknown) appears only when no other cause does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from oomwatch.engine.cause_rules import MAX_CONFIDENCE, CauseRule
from oomwatch.engine.facts import primary_report
from oomwatch.engine.model import Cause, Event, Evidence, LiveEvidence, OomReport, Victim
from oomwatch.engine.sizes import human
from oomwatch.engine.taskfacts import evidence_rows

_FACT = re.compile(r"\{([\w.]+)\}")
MAX_EVIDENCE = 6


def fact_text(facts: Mapping[str, Any], name: str) -> str:
    value = facts.get(name)
    if value is None:
        return "?"
    if name.endswith("_bytes") and isinstance(value, int):
        return human(value)
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def rank_causes(
    rules: Sequence[CauseRule],
    verdict: str,
    facts: Mapping[str, Any],
    events: Sequence[Event],
    victims: Sequence[Victim],
    reports: Sequence[OomReport],
    live: LiveEvidence | None = None,
) -> list[Cause]:
    found: list[tuple[float, int, Cause]] = []
    fallbacks: list[CauseRule] = []
    for order, rule in enumerate(rules):
        if rule.verdicts and verdict not in rule.verdicts:
            continue
        if not rule.when.evaluate(facts):
            continue
        if rule.fallback:
            fallbacks.append(rule)
            continue
        held = [sig for sig in rule.signals if sig.when.evaluate(facts)]
        confidence = round(min(MAX_CONFIDENCE, sum(sig.weight for sig in held)), 2)
        if confidence <= 0:
            continue
        per_signal: list[list[Evidence]] = []
        for sig in held:
            if sig.evidence:
                if sig.evidence.startswith("history:"):
                    per_signal.append(list(live.evidence.get(sig.evidence[8:], ()) if live else ()))
                else:
                    per_signal.append(_evidence(sig.evidence, facts, events, victims, reports))
        # each signal's first line, then each one's second...: every signal that held is shown
        # before any one of them fills the evidence list
        evidence = [lines[i] for i in range(max(map(len, per_signal), default=0)) for lines in per_signal
                    if i < len(lines)]  # fmt: skip
        reasons = tuple(_FACT.sub(lambda m: fact_text(facts, m.group(1)), sig.says) for sig in held if sig.says)
        found.append((confidence, order, _cause(rule, confidence, _unique(evidence), reasons)))
    if not found:
        return [_cause(rule, 0.0, (), ()) for rule in fallbacks[:1]]
    found.sort(key=lambda item: (-item[0], item[1]))
    return [cause for _, _, cause in found]


def _cause(rule: CauseRule, confidence: float, evidence: tuple[Evidence, ...], reasons: tuple[str, ...]) -> Cause:
    return Cause(
        id=rule.id,
        title=rule.title,
        confidence=confidence,
        evidence=evidence,
        fix=rule.fix,
        confirm=rule.confirm,
        mechanism=rule.mechanism,
        remedy=rule.remedy,
        reasons=reasons,
        references=rule.references,
    )


def _unique(items: list[Evidence]) -> tuple[Evidence, ...]:
    seen: set[tuple[str, int]] = set()
    out = []
    for ev in items:
        if (ev.file, ev.line) not in seen:
            seen.add((ev.file, ev.line))
            out.append(ev)
    return tuple(out[:MAX_EVIDENCE])


def _evidence(
    name: str,
    facts: Mapping[str, Any],
    events: Sequence[Event],
    victims: Sequence[Victim],
    reports: Sequence[OomReport],
) -> list[Evidence]:
    if name.startswith("hint:"):
        hint = name[5:]
        return [ev.evidence for ev in events if ev.kind == "hint" and ev.fields.get("hint") == hint][:2]
    if name.startswith("event:"):
        kind = name[6:]
        return [ev.evidence for ev in events if ev.kind == kind][:2]
    first = victims[0] if victims else None
    if name == "victim":
        return list(first.evidence[-2:]) if first else []
    rep = primary_report(reports, first)
    if rep is None:
        return []
    if name == "tasks:peers":
        names = {str(facts.get("victim.name") or facts.get("tasks.top_name"))}
        rows = evidence_rows(rep, names)
    elif name == "tasks:workers":
        rows = evidence_rows(rep, {"pt_data_worker"})
    else:  # tasks:top
        rows = evidence_rows(rep, None, limit=2)
    return [Evidence(rep.file, r.line, r.text) for r in rows]
