"""Rank the causes that the evidence supports (rules/causes.yaml decides; this evaluates).

A cause appears only when its `when` holds over the facts; its confidence is the sum of the
weights of its signals that hold (capped); its evidence is the lines those signals name.
A `fallback` cause (unknown) appears only when no other cause does. A cause one of whose
`unless` conditions holds is ruled out by measurement: it is dropped, and a note says why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from oomwatch.engine.facts import primary_report
from oomwatch.engine.model import Cause, Event, Evidence, LiveEvidence, OomReport, Victim
from oomwatch.engine.rules.cause_rules import MAX_CONFIDENCE, CauseRule
from oomwatch.engine.sizes import human
from oomwatch.engine.taskfacts import evidence_rows

_FACT = re.compile(r"\{([\w.]+)\}")
DERIVED = ("job:", "growth", "activity:", "code:")  # evidence of engine.derived
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


def _say(template: str, facts: Mapping[str, Any]) -> str:
    return _FACT.sub(lambda m: fact_text(facts, m.group(1)), template)


def rank_causes(
    rules: Sequence[CauseRule],
    verdict: str,
    facts: Mapping[str, Any],
    events: Sequence[Event],
    victims: Sequence[Victim],
    reports: Sequence[OomReport],
    live: LiveEvidence | None = None,
    derived: Mapping[str, Sequence[Evidence]] | None = None,
    ruled_out: list[str] | None = None,
) -> list[Cause]:
    """The causes that hold, most likely first; ``ruled_out`` collects why a cause was dropped."""
    found: list[tuple[float, int, Cause]] = []
    fallbacks: list[CauseRule] = []
    for order, rule in enumerate(rules):
        if rule.verdicts and verdict not in rule.verdicts:
            continue
        if not rule.when.evaluate(facts):
            continue
        against = [_say(says, facts) for cond, says in rule.unless if cond.evaluate(facts)]
        if against:
            if ruled_out is not None:
                ruled_out.append(f"Not {rule.id} ({rule.title.lower()}): {'; '.join(against)}.")
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
                elif sig.evidence.startswith(DERIVED):
                    per_signal.append(list((derived or {}).get(sig.evidence, ()))[:3])
                else:
                    per_signal.append(_evidence(sig.evidence, facts, events, victims, reports))
        # each signal's first line, then each one's second...: every signal that held is shown
        # before any one of them fills the evidence list
        evidence = [lines[i] for i in range(max(map(len, per_signal), default=0)) for lines in per_signal
                    if i < len(lines)]  # fmt: skip
        reasons = tuple(_say(sig.says, facts) for sig in held if sig.says)
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
    """Each line once; evidence with no line number (the agent's history: line 0) is told apart by its text."""
    seen: set[tuple[str, int, str]] = set()
    out = []
    for ev in items:
        key = (ev.file, ev.line, ev.text if ev.line <= 0 else "")
        if key not in seen:
            seen.add(key)
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


def is_determined(
    causes: Sequence[Cause], decide: Mapping[str, float], refines: Mapping[str, Sequence[str]] | None = None
) -> bool:
    """Whether the top cause stands out: confident enough, and ahead of the next one that is not a
    general form of it (``refines``: cause id -> the causes it is a special case of)."""
    if not causes or causes[0].id == "unknown":
        return False
    top = causes[0]
    if top.confidence < decide.get("min_confidence", 0.4):
        return False
    general = set((refines or {}).get(top.id, ()))
    rivals = [c for c in causes[1:] if c.id not in general and c.id != "unknown"]
    # rounded: confidences are sums of weights in tenths, and 0.5 - 0.4 is 0.09999999999999998
    return not rivals or round(top.confidence - rivals[0].confidence, 6) >= decide.get("min_lead", 0.1)


def with_what_to_collect(
    causes: Sequence[Cause], rules: Sequence[CauseRule], facts: Mapping[str, Any], live: LiveEvidence | None
) -> list[Cause]:
    """The candidates, then the fallback cause (`unknown`) whose reasons are what is missing from the
    evidence: what would tell the candidates apart."""
    fallback = next((r for r in rules if r.fallback), None)
    missing = []
    if not facts.get("code.files"):
        missing.append(
            "the training script: `oomwatch diagnose --script train.py LOG...` (read, never run), or run the job "
            "under `oomwatch run`, which reads it"
        )
    if not facts.get("kernel.reports"):
        missing.append(
            "the kernel's OOM report from the node (`dmesg -T`, `journalctl -k`): its task table shows each "
            "process's memory when it ran out"
        )
    if live is None:
        missing.append(
            "samples of each process's private memory while the job runs: `oomwatch run -- CMD` or the agent "
            "(what grew, in which process, and when)"
        )
    if not facts.get("activity.streams"):
        missing.append("the job's own output up to the kill: each rank's last lines say what it was doing")
    out = [c for c in causes if c.id != "unknown"]
    if fallback is not None:
        out.append(_cause(fallback, 0.0, (), tuple(f"collect {m}" for m in missing)))
    return out
