"""An incident for a person, as text: who was killed when, the diagnosis and the job's history before the kill.

Also whether an incident is one of the kernel's OOM kills (``is_oom_kill``, by the engine's verdict table): the
text and the HTML page both title an incident by it.
"""

from __future__ import annotations

import time
from typing import Any

from oomwatch.engine.roles import role_phrase
from oomwatch.engine.sizes import human
from oomwatch.engine.verdicts import OOM_KILL_VERDICTS
from oomwatch.render.layout import NOT_A_TERMINAL, table, wrap
from oomwatch.textsafe import escape_controls, escape_lines


def is_oom_kill(doc: dict[str, Any]) -> bool:
    """Whether an incident is the kernel's OOM kill (else a SIGKILL from elsewhere, see agent.sigkills)."""
    return (doc.get("diagnosis") or {}).get("verdict") in OOM_KILL_VERDICTS


def render_incident_text(doc: dict[str, Any], diagnosis_text: str, width: int = NOT_A_TERMINAL) -> str:
    """The incident for a person: who was killed when, ``diagnosis_text`` (rendered in ``width``
    columns) and the job's history, every line at most ``width`` columns."""
    v = doc["victim"]
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc["time"]))
    who = f"pid {v['pid']} ({v['comm']}" + (f", {role_phrase(v['role'], v.get('rank'))}" if v.get("role") else "") + ")"
    of_job = f" of job {v['job']}" if v["job"] else ""
    if is_oom_kill(doc):
        said = f"{when}: the kernel killed {who}{of_job}"
    else:
        said = f"{when}: {who}{of_job} was killed by SIGKILL, not by the kernel's OOM killer"
    # comm, job, cgroups and quoted output are the processes' own: each line escaped before the lines
    # are joined (a job named "x\nFAKE" starts no line), and the diagnosis's lines once more
    out = [*wrap(escape_controls(f"oomwatch incident {doc['id']}"), width, quoted=True)]
    out += wrap(escape_controls(said), width, rest="  ")
    out += ["", escape_lines(diagnosis_text.rstrip("\n")), ""]
    out.append(_history_table(doc["history"], width))
    return "\n".join(out).rstrip("\n") + "\n"


def _history_table(history: dict[str, Any], width: int) -> str:
    rows = history.get("processes") or []
    if not rows:
        return "\n".join(wrap(escape_controls(f"History: none ({history.get('source', '')})."), width, rest="  "))
    by_pid: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_pid.setdefault(r["pid"], []).append(r)
    lines = wrap(escape_controls(f"History ({history.get('source', '')}): first → peak → last"), width, rest="  ")
    table_rows = []
    for pid, rs in sorted(by_pid.items()):
        rs.sort(key=lambda r: r.get("time") or 0)
        last = rs[-1]

        def span(key: str, rs: list[dict[str, Any]] = rs) -> str:
            vals: list[int] = [r[key] for r in rs if r.get(key) is not None]
            if not vals:
                return "-"
            return f"{human(vals[0])} → {human(max(vals))} → {human(vals[-1])}"

        rank = "-" if last.get("rank") is None else str(last["rank"])
        table_rows.append([str(pid), escape_controls(str(last.get("role"))), rank, span("anon"), span("uss")])
    lines.extend(table(("PID", "ROLE", "RANK", "ANON", "USS"), table_rows, width, right=(0, 2)))
    return "\n".join(escape_controls(line) for line in lines)


def summary_text(summary: str) -> str:
    """An undiagnosed incident's one summary, in place of the diagnosis's text."""
    return "\n".join(wrap(escape_controls(summary), NOT_A_TERMINAL, rest="  ")) + "\n"


def render_incident_list(docs: list[dict[str, Any]], width: int = NOT_A_TERMINAL) -> str:
    """``oomwatch incidents``: one entry per incident (id, time, victim, verdict, top cause), each wrapped
    in ``width`` columns."""
    out = []
    for doc in docs:
        v = doc.get("victim", {})
        d = doc.get("diagnosis", {})
        causes = d.get("causes") or []
        cause = causes[0].get("id") if causes else "-"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc.get("time", 0)))
        role = role_phrase(v.get("role") or "-", v.get("rank"))
        line = escape_controls(f"{doc['id']}  {when}  pid {v.get('pid')} {v.get('comm')} ({role})  "
                               f"{d.get('verdict')}  cause: {cause}")  # fmt: skip
        out.append("\n".join(wrap(line, width, rest="    ", quoted=True)) + "\n")
    return "".join(out)
