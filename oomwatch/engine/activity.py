"""What each process was doing when memory ran out, from the last lines it printed.

The scanner keeps, for every input, the lines just before its first failure line (a
``kill_marks`` event of rules/activities.yaml: a launcher's kill report, a shell's ``Killed``)
or, with none, its last lines. Each line belongs to a stream: a rank when a ``streams`` rule
says so (``[rank 3] ...``, ``[default0]:``, an MPI tag, a torchrun log-dir file), else its file.
A stream's activity is that of its last line matching an activity (the first, in the file's
order, that matches it). Facts: ``activity.<id>`` (how many streams ended in it),
``activity.streams``, ``activity.victim`` (the victim's rank's, or the only stream's) and
``activity.last`` (the most common, ties to the latest line). Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from oomwatch.engine.model import Evidence, Line, Victim
from oomwatch.engine.progress import progress
from oomwatch.engine.rules.activity_rules import Activity, StepRule, StreamRule
from oomwatch.engine.scanner import ScanResult

Key = tuple[str, Any]  # ("rank", 3) or ("file", name)


def _rank(rules: Sequence[StreamRule], text: str) -> int | None:
    for rule in rules:
        if not rule.on_file:
            rank = rule.rank(text)
            if rank is not None:
                return rank
    return None


def _activity(activities: Sequence[Activity], text: str) -> Activity | None:
    for act in activities:
        try:
            if act.pattern.search(text, timeout=0.25):
                return act
        except TimeoutError:
            continue
    return None


def _kept_lines(scan: ScanResult) -> tuple[Line, ...]:
    """The lines the scanner kept of an input: those before its first failure line, or its last lines."""
    return scan.before_failure if scan.before_failure is not None else scan.last_lines


def _whole(scan: ScanResult) -> tuple[Line, ...] | None:
    """The lines before the failure (or all of them) when the window holds the input from its start."""
    return _kept_lines(scan) if scan.whole_window else None


def _job_output(scan: ScanResult) -> bool:
    """An input that is the job's own output: not a kernel log, with lines of its own."""
    return scan.kernel_share < 0.5 and not scan.reports and any(not ln.kernel for ln in scan.last_lines)


def before_training(scans: Sequence[ScanResult], activities: Sequence[Activity]) -> bool | None:
    """True when the job's whole output up to the kill is known, says what it did, and shows no
    training step (it ran out while setting up: loading data, building a model); None when that
    cannot be told."""
    outputs = [s for s in scans if _job_output(s)]
    seen = [lines for s in outputs if (lines := _whole(s)) is not None]
    if not seen or len(seen) < len(outputs):
        return None  # no job output, or one whose start is not in the window (it may have had steps)
    said = [act for lines in seen for ln in lines if not ln.kernel and (act := _activity(activities, ln.text))]
    if not said:
        return None  # it said nothing of what it did: no telling whether it trained
    return not any(act.id == "training" for act in said)


def steps_before_kill(scans: Sequence[ScanResult], steps: Sequence[StepRule]) -> int | None:
    """The training step the job's output had reached before its failure line (rules/activities.yaml
    `steps`: "step 60/250 loss ...", a bar's "45/125"), at least: the lines kept are the last before the
    failure. None when they show no step counter."""
    reached = []
    for scan in scans:
        if not _job_output(scan):
            continue
        lines = _kept_lines(scan)
        found = progress([(float(i), ln.text) for i, ln in enumerate(lines) if not ln.kernel], steps)
        if found is not None:
            reached.append(found.last_step)
    return max(reached) if reached else None


def last_activities(
    scans: Sequence[ScanResult], activities: Sequence[Activity], streams: Sequence[StreamRule]
) -> dict[Key, tuple[Activity, Line]]:
    """Each stream's last activity and the line that shows it."""
    last: dict[Key, tuple[Activity, Line]] = {}
    for scan in scans:
        lines = _kept_lines(scan)
        file_rank = next((r.rank(scan.file) for r in streams if r.on_file and r.rank(scan.file) is not None), None)
        for line in lines:
            if line.kernel:
                continue
            act = _activity(activities, line.text)
            if act is None:
                continue
            rank = file_rank if file_rank is not None else _rank(streams, line.text)
            key: Key = ("rank", rank) if rank is not None else ("file", scan.file)
            last[key] = (act, line)
    return last


def activity_facts(
    scans: Sequence[ScanResult],
    activities: Sequence[Activity],
    streams: Sequence[StreamRule],
    victims: Sequence[Victim],
    steps: Sequence[StepRule] = (),
) -> tuple[dict[str, Any], dict[str, list[Evidence]]]:
    """The ``activity.*`` facts, and for each activity the lines that show it (one per stream)."""
    last = last_activities(scans, activities, streams)
    facts: dict[str, Any] = {f"activity.{a.id}": 0 for a in activities}
    counts = Counter(act.id for act, _ in last.values())
    facts.update({f"activity.{k}": v for k, v in counts.items()})
    facts["activity.streams"] = len(last)
    victim_rank = victims[0].rank if victims else None
    mine = last.get(("rank", victim_rank)) if victim_rank is not None else None
    if mine is None and len(last) == 1:
        mine = next(iter(last.values()))
    facts["activity.victim"] = mine[0].id if mine else None
    latest = {act.id: (line.file, line.no) for act, line in sorted(last.values(), key=lambda v: (v[1].file, v[1].no))}
    facts["activity.last"] = max(counts, key=lambda k: (counts[k], latest[k])) if counts else None
    facts["activity.before_training"] = before_training(scans, activities)
    facts["activity.steps_before_kill"] = steps_before_kill(scans, steps)
    evidence: dict[str, list[Evidence]] = {}
    ordered = sorted(last.items(), key=lambda kv: (kv[0][0] != "rank", str(kv[0][1])))
    for _, (act, line) in ordered:
        evidence.setdefault(act.id, []).append(Evidence(line.file, line.no, line.text))
    return facts, evidence
