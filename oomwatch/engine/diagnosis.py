"""The Diagnosis: the one result every front end renders (DESIGN.md: public JSON keys)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oomwatch.engine.model import Cause, Event, Evidence, InputInfo, OomReport, Victim
from oomwatch.engine.timeline import Timeline

SCHEMA_ID = "oomwatch.diagnosis/v1"
REVISION = 2  # keys added within v1 (2: other_kills, set_aside, timeline); none removed or renamed
MAX_EVENTS = 200  # events listed in the JSON; the count of all is kept


@dataclass(frozen=True)
class Diagnosis:
    verdict: str
    confirmed: bool
    summary: str
    victims: tuple[Victim, ...]
    causes: tuple[Cause, ...]
    events: tuple[Event, ...]
    inputs: tuple[InputInfo, ...]
    next_steps: tuple[str, ...]
    notes: tuple[str, ...]
    rule: str | None
    evidence: tuple[Evidence, ...]  # the lines that prove the verdict, most telling first
    facts: dict[str, Any]
    # whether the top cause stands out (rules/causes.yaml `decide`); when not, `causes` are candidates
    # and the last one, `unknown`, says what to collect to tell them apart; None: no cause applies
    cause_determined: bool | None = True
    # kernel OOM kills in the inputs that are not this failure's (other cgroups, other times): listed only
    other_kills: tuple[OomReport, ...] = ()
    # inputs left out as another failure's: (input, why)
    set_aside: tuple[tuple[str, str], ...] = ()
    # which rank or node failed first and which after it; None when fewer than two failed
    timeline: Timeline | None = None

    @property
    def top_cause(self) -> Cause | None:
        """The cause to act on: the first, when it is determined."""
        return self.causes[0] if self.causes and self.cause_determined else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": SCHEMA_ID,
            "revision": REVISION,
            "verdict": self.verdict,
            "confirmed": self.confirmed,
            "summary": self.summary,
            "victims": [v.to_json() for v in self.victims],
            "causes": [c.to_json() for c in self.causes],
            "cause_determined": self.cause_determined,
            "events": [_event_json(e) for e in self.events[:MAX_EVENTS]],
            "events_total": len(self.events),
            "evidence": [e.to_json() for e in self.evidence],
            "next_steps": list(self.next_steps),
            "notes": list(self.notes),
            "rule": self.rule,
            "inputs": [i.to_json() for i in self.inputs],
            "other_kills": [other_kill_json(r) for r in self.other_kills],
            "set_aside": [{"file": f, "reason": why} for f, why in self.set_aside],
        }
        if self.timeline is not None:
            out["timeline"] = self.timeline.to_json()
        return out


def other_kill_json(r: OomReport) -> dict[str, Any]:
    """A kill set aside: when, whom, where, under which limit, and the line that says so."""
    return {
        "time": r.time,
        "pid": r.dead_pid,
        "name": r.dead_name,
        "constraint": r.constraint,
        "cgroup": r.oom_memcg or r.task_memcg,
        "limit_bytes": r.memcg_limit_bytes,
        "anon_rss_bytes": r.anon_rss_bytes,
        "host": r.host,
        "file": r.file,
        "line": r.last_line,
    }


def _event_json(e: Event) -> dict[str, Any]:
    return {
        "kind": e.kind,
        "rule": e.rule,
        "file": e.line.file,
        "line": e.line.no,
        "time": e.line.time,
        "text": e.line.text,
        "fields": dict(sorted(e.fields.items())),
    }
