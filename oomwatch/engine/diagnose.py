"""From scan results to a Diagnosis: victims, facts, verdict, evidence, notes. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from oomwatch.engine.causes import is_determined, rank_causes, with_what_to_collect
from oomwatch.engine.derived import Derived, derived_facts
from oomwatch.engine.diagnosis import Diagnosis
from oomwatch.engine.fact_names import hint_names
from oomwatch.engine.facts import FACTS_FROM_EVENTS, agent_facts, compute_facts
from oomwatch.engine.groupkill import group_kill_notes
from oomwatch.engine.model import Event, Evidence, LiveEvidence, Observed, OomReport, Program, Victim
from oomwatch.engine.rules.ruleset import RuleSet
from oomwatch.engine.scanner import ScanResult
from oomwatch.engine.selection import Selection, inside, select_reports
from oomwatch.engine.timeline import Timeline, build_timeline, verdict_note
from oomwatch.engine.verdict_choice import choose, render, template_values
from oomwatch.engine.verdicts import KILL_VERDICTS, NO_OOM_EVIDENCE, OOM_KILL_VERDICTS
from oomwatch.engine.victims import build_victims

MAX_EVIDENCE = 8


def diagnose(
    scans: Sequence[ScanResult],
    rules: RuleSet,
    known: Mapping[int, tuple[str, int | None]] | None = None,
    live: LiveEvidence | None = None,
    observed: Observed | None = None,
    program: Program | None = None,
) -> Diagnosis:
    """``known``: pid → (role, rank) seen live (``oomwatch run``'s samples); without it roles are
    inferred from names and launcher lines. ``live``: ``history.*`` facts and their evidence from
    live samples (the agent's analyzers). ``observed``: what the agent saw itself (a SIGKILL in the
    kernel's exit events, an OOM-kill counter): ``agent.*`` facts and the victims as sampled.
    ``program``: the code that ran (the training script and its command line)."""
    chosen, reports, events, aside = _the_jobs(scans, known, observed)
    victims = build_victims(reports, events, known)
    if observed is not None:
        seen = {v.pid for v in victims if v.pid is not None}
        victims = [*(v for v in observed.victims if v.pid not in seen), *victims]
    timeline = build_timeline(_only_the_jobs(scans, aside), rules)
    victims = _first_failure_first(victims, timeline)
    facts, found = _facts(scans, rules, reports, events, victims, known, live, observed, program)
    rule = choose(rules.verdicts, facts)
    values = {**template_values(victims, reports), **(observed.values if observed is not None else {})}
    verdict = rule.verdict if rule else NO_OOM_EVIDENCE
    evidence = _evidence(rule.when.facts() if rule else set(), victims, events, reports, live)
    ruled_out: list[str] = []
    causes = rank_causes(rules.causes, verdict, facts, events, victims, reports, live, found.evidence, ruled_out)
    notes = [*(observed.notes if observed is not None else ()), *_notes(facts, reports, events, verdict, live)]
    notes.extend(group_kill_notes(reports, victims[0] if victims else None))
    notes.extend(found.notes + ruled_out)
    refines = {r.id: r.refines for r in rules.causes}
    determined = is_determined(causes, rules.decide, refines) if causes else None
    if not determined and causes:
        causes = with_what_to_collect(causes, rules.causes, facts, live)
    if chosen.others:
        notes.append(_others_note(chosen.how, len(chosen.others)))
    for s in scans:
        notes.extend(f"{s.file}: {n}" for n in s.notes)
    timeline = _agreeing(timeline, victims)
    notes.extend(n for n in [verdict_note(timeline, evidence)] if n)
    return Diagnosis(
        verdict=verdict,
        confirmed=rule.confirmed if rule else False,
        summary=" ".join(render(rule.summary, values).split()) if rule else "",
        victims=tuple(victims),
        causes=tuple(causes),
        events=tuple(events),
        inputs=tuple(s.info for s in scans if s.info is not None),
        next_steps=tuple(render(step, values) for step in (rule.next_steps if rule else ())),
        notes=tuple(notes),
        rule=rule.id if rule else None,
        evidence=evidence,
        facts=facts,
        cause_determined=determined,
        other_kills=chosen.others,
        timeline=timeline,
    )


def _the_jobs(
    scans: Sequence[ScanResult], known: Mapping[int, tuple[str, int | None]] | None, observed: Observed | None
) -> tuple[Selection, list[OomReport], list[Event], list[OomReport]]:
    """Which kernel reports are the job's (engine.selection), the job's reports and events, and the
    reports set aside (older kills of other programs: listed, never mixed into this failure)."""
    events = [ev for s in scans for ev in s.events]
    reports = [r for s in scans for r in s.reports]
    seen_live = [*(known or {}), *(v.pid for v in (observed.victims if observed is not None else ()) if v.pid)]
    chosen = select_reports(reports, events, seen_live)
    mine = {id(r) for r in chosen.job}
    aside = [r for r in reports if id(r) not in mine]  # the kills listed apart, and their copies
    if aside:
        reports = list(chosen.job)
        events = _job_events(events, aside)
    return chosen, reports, events, aside


def _facts(
    scans: Sequence[ScanResult],
    rules: RuleSet,
    reports: list[OomReport],
    events: list[Event],
    victims: list[Victim],
    known: Mapping[int, tuple[str, int | None]] | None,
    live: LiveEvidence | None,
    observed: Observed | None,
    program: Program | None,
) -> tuple[dict[str, Any], Derived]:
    """Every fact: from events, reports and victims, the agent's, the live history's, and the derived
    ones (those come with their evidence and notes)."""
    facts = compute_facts(
        reports, events, victims, [s.kernel_share for s in scans], rules.events, hint_names(rules.fingerprints)
    )
    facts.update(agent_facts(observed))
    if live is not None:
        facts.update({k: v for k, v in live.facts.items() if k.startswith("history.")})
    found = derived_facts(scans, rules, reports, events, victims, known or {}, live, program)
    facts.update(found.facts)
    return facts, found


def _first_failure_first(victims: list[Victim], timeline: Timeline | None) -> list[Victim]:
    """The verdict is the first failure's: when the timeline's first failure is a victim on another
    node than the victim chosen first, and strictly earlier, that victim goes first. (On one node
    the victims keep their order: of a cascade of kills the latest is the one the log ends with.)"""
    if timeline is None or not victims or timeline.first.pid is None or timeline.first.time is None:
        return victims
    head = victims[0]
    mine = next((f for f in timeline.after if f.pid == head.pid and f.pid is not None), None)
    moved = next((i for i, v in enumerate(victims) if v.pid == timeline.first.pid), None)
    if moved is None or mine is None or mine.host is None or mine.host == timeline.first.host:
        return victims
    if mine.time is None or mine.time == timeline.first.time:
        return victims
    return [victims[moved], *victims[:moved], *victims[moved + 1 :]]


def _agreeing(timeline: Timeline | None, victims: Sequence[Victim]) -> Timeline | None:
    """Two root failures at the same printed time: the one the verdict names is said first."""
    if timeline is None or not victims or victims[0].pid is None or timeline.first.pid == victims[0].pid:
        return timeline
    first = timeline.first
    i = next((i for i, f in enumerate(timeline.after) if f.pid == victims[0].pid), None)
    if i is None:
        return timeline
    tied = timeline.after[i]
    if tied.role != "root" or first.role != "root" or tied.time != first.time:
        return timeline
    rest = (first, *timeline.after[:i], *timeline.after[i + 1 :])
    return replace(timeline, first=tied, after=rest)


def _job_events(events: Sequence[Event], aside: Sequence[OomReport]) -> list[Event]:
    """The events without the kernel lines of the reports set aside."""
    return [ev for ev in events if not (ev.line.kernel and inside(ev, aside))]


def _only_the_jobs(scans: Sequence[ScanResult], others: Sequence[OomReport]) -> Sequence[ScanResult]:
    """The inputs without the kills set aside (and their lines): what the timeline may order."""
    if not others:
        return scans
    aside = {id(r) for r in others}
    return [
        replace(s, reports=[r for r in s.reports if id(r) not in aside], events=_job_events(s.events, others))
        for s in scans
    ]  # fmt: skip


def _others_note(how: str, count: int) -> str:
    which = {
        "pid": "the kill of the pid the job's own lines name",
        "host": "the latest kill on the host the job's lines came from",
        "time": "the kill closest in time to the job's first failure line",
        "job": "the kill in the cgroup of the scheduler job the lines name",
    }.get(how, "the latest kill, as no line of the job named its pid")
    kills = "kill" if count == 1 else "kills"
    verb = "is" if count == 1 else "are"
    return (
        f"This diagnosis is about {which}; {count} other OOM {kills} in these inputs (other cgroups or "
        f"times) {verb} listed apart and left out of the victims and causes."
    )


def _evidence(
    fact_names: set[str],
    victims: Sequence,
    events: Sequence[Event],
    reports: Sequence[OomReport],
    live: LiveEvidence | None = None,
) -> tuple[Evidence, ...]:
    """The lines behind the verdict: the first victim's, then lines of the kinds it used, then the
    live lines of the ``history.*`` facts it used (``history.swap_used_ratio``: topic "swap")."""
    picked: list[Evidence] = []
    if victims:
        picked.extend(victims[0].evidence)
    elif any(name.startswith("kernel.") for name in fact_names) and reports:
        picked.extend(reports[0].evidence)
    kinds = {name.split(".", 1)[1] for name in fact_names if name.startswith("events.")}
    kinds.update(FACTS_FROM_EVENTS[n.split(".", 1)[0]] for n in fact_names if n.split(".", 1)[0] in FACTS_FROM_EVENTS)
    picked.extend(ev.evidence for ev in events if ev.kind in kinds)
    if live is not None:
        topics = dict.fromkeys(n.split(".", 1)[1].split("_", 1)[0] for n in fact_names if n.startswith("history."))
        for topic in topics:
            picked.extend(live.evidence.get(topic, ()))
    seen: set[tuple[str, int]] = set()
    unique = []
    for ev in picked:
        if (ev.file, ev.line) not in seen:
            seen.add((ev.file, ev.line))
            unique.append(ev)
    return tuple(unique[:MAX_EVIDENCE])


def _notes(
    facts: dict, reports: Sequence[OomReport], events: Sequence[Event], verdict: str, live: LiveEvidence | None
) -> list[str]:
    notes: list[str] = []
    cuda_first = facts.get("order.cuda_oom_before_kill")
    if cuda_first is True:
        notes.append(
            "A CUDA out-of-memory error comes before the kernel's kill: the GPU error happened "
            "first, but the process was then killed for host RAM; fix host memory, a GPU fix alone will not do."
        )
    elif cuda_first is False:
        notes.append(
            "The kernel killed a process before any CUDA out-of-memory error: host RAM ran out "
            "first; the later GPU error is a consequence or unrelated, and GPU playbooks will not help."
        )
    killed = [r for r in reports if r.killed]
    first = killed[0] if killed else None
    if (
        first is not None
        and first.trigger_name
        and (
            first.trigger_pid != first.victim_pid
            if first.trigger_pid is not None
            else first.trigger_name != first.victim_name
        )
    ):
        who = f"{first.trigger_name}" + (f" (pid {first.trigger_pid})" if first.trigger_pid is not None else "")
        notes.append(
            f"The OOM killer was invoked by {who}, but it killed pid {first.victim_pid} ({first.victim_name}): "
            "the trigger only asked for memory last; the victim is the process the kernel chose to free the most."
        )
    if first is not None and first.selected_pid is not None and first.selected_pid != first.victim_pid:
        notes.append(
            f"The kernel selected pid {first.selected_pid} ({first.selected_name}) and killed its child "
            f'pid {first.victim_pid} ({first.victim_name}) instead ("sacrifice child").'
        )
    if facts.get("kernel.manual_kills"):
        notes.append(
            "A kill was forced by hand (SysRq-f, moom_callback): the OOM killer ran on request, "
            "not because memory ran out."
        )
    thrash = _thrash(facts, live)
    if thrash and verdict in KILL_VERDICTS:
        notes.append(
            "Memory had been short for a while before the kill (paging, tasks stalled), so the job was slow "
            f"before it died — {thrash}."
        )
    if verdict in OOM_KILL_VERDICTS and facts.get("kernel.kills", 0) > 1:
        notes.append(f"The kernel killed {facts['kernel.kills']} processes in this input.")
    return notes


def _thrash(facts: Mapping[str, object], live: LiveEvidence | None) -> str:
    """The agent's swap and stall lines when they are notable (swap 90%+ used, PSI full 10%+); "" if not."""
    if live is None:
        return ""
    swap = facts.get("history.swap_used_ratio")
    full = facts.get("history.pressure_full_avg10")
    lines: list[str] = []
    if isinstance(swap, (int, float)) and swap >= 0.9:
        lines.extend(e.text for e in live.evidence.get("swap", ()))
    if isinstance(full, (int, float)) and full >= 10:
        lines.extend(e.text for e in live.evidence.get("pressure", ()))
    return "; ".join(lines)
