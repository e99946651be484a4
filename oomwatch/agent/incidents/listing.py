"""Incidents read back: where they are (``incident_dir``), every usable one on disk (``list_incidents``),
what makes a document unusable (``incident_problem``) and one read for a page (``read_incident``). Read by
the agent at start (its recent incidents and kill ids), by ``oomwatch incidents`` and by the exporter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

INCIDENT_SCHEMA = "oomwatch.incident/v1"


def incident_dir(state_dir: Path) -> Path:
    return state_dir / "incidents"


def list_incidents(state_dir: Path, skipped: list[str] | None = None) -> list[dict[str, Any]]:
    """The incidents on disk, oldest first. Files that cannot be read or are not incidents of a usable
    shape are left out; ``skipped`` (when given) gets a line for each of ours that was."""
    out = []
    for path in sorted(incident_dir(state_dir).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as exc:
            if skipped is not None:
                skipped.append(f"{path.name}: unreadable ({type(exc).__name__})")
            continue
        if not isinstance(doc, dict) or doc.get("schema") != INCIDENT_SCHEMA:
            continue  # not ours
        problem = incident_problem(doc)
        if problem is None:
            out.append(doc)
        elif skipped is not None:
            skipped.append(f"{path.name}: {problem}")
    return out


def incident_problem(doc: dict[str, Any]) -> str | None:
    """What makes an incident document unusable (its id, time, victim, diagnosis), or None."""
    if not isinstance(doc.get("id"), str):
        return "no id"
    if not isinstance(doc.get("time"), int | float) or isinstance(doc.get("time"), bool):
        return "no time"
    victim, diagnosis = doc.get("victim"), doc.get("diagnosis")
    if not isinstance(victim, dict):
        return "no victim"
    if not isinstance(diagnosis, dict):
        return "no diagnosis"
    causes = diagnosis.get("causes", [])
    if not isinstance(causes, list) or not all(isinstance(c, dict) for c in causes):
        return "malformed causes"
    return None


def read_incident(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the incident document in ``path``, None), or (None, why it cannot be used: a line for people)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        return None, f"{path}: cannot read the incident: {exc}"
    if not isinstance(doc, dict):
        return None, f"{path}: not an incident (not a JSON object)"
    problem = incident_problem(doc)
    if problem is not None:
        return None, f"{path}: not an incident of a usable shape ({problem})"
    return doc, None
