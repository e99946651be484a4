"""Render a Diagnosis: text for a person, JSON for machines, Markdown for an issue.

Data in, text out; deterministic (no clock, no terminal queries). Text and Markdown quote logs,
process names and job names: control characters in them are shown as escapes (``\\x1b``, see
:mod:`oomwatch.textsafe`), and Markdown renders no HTML from them. JSON keeps them as data.
"""

from __future__ import annotations

import json
import textwrap

from oomwatch.engine.diagnosis import Diagnosis
from oomwatch.engine.model import Cause, Evidence
from oomwatch.engine.sizes import human
from oomwatch.engine.timeline import Failure
from oomwatch.textsafe import code_fence, code_span, escape_controls, markdown_text

HEADLINES = {
    "host_oom": "HOST OUT OF MEMORY (kernel OOM killer)",
    "cgroup_oom": "MEMORY LIMIT HIT (cgroup / container / job limit)",
    "userspace_oom_kill": "KILLED BY A USERSPACE OOM KILLER",
    "cuda_oom": "GPU OUT OF MEMORY (CUDA)",
    "shm_exhausted": "SHARED MEMORY (/dev/shm) EXHAUSTED",
    "python_memory_error": "PYTHON MemoryError",
    "swap_thrash": "SWAP EXHAUSTED",
    "sigkill_unexplained": "KILLED BY SIGKILL, NOT BY THE OOM KILLER AS FAR AS THE LOGS SHOW",
    "other_crash": "NOT A MEMORY FAILURE (crash or scheduler kill)",
    "no_oom_evidence": "NO MEMORY FAILURE FOUND",
}
MAX_TEXT = 160  # characters of an evidence line shown in text/markdown


def render_json(d: Diagnosis) -> str:
    return json.dumps(d.to_json(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def _headline(d: Diagnosis) -> str:
    status = "confirmed" if d.confirmed else "not confirmed"
    return f"{HEADLINES.get(d.verdict, d.verdict)} [{d.verdict}, {status}]"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def _where(e: Evidence) -> str:
    return f"{e.file}:{e.line}"


def _victim_rows(d: Diagnosis) -> list[list[str]]:
    rows = []
    for v in d.victims:
        rows.append(
            [
                str(v.pid) if v.pid is not None else "-",
                v.name or "-",
                v.role,
                str(v.rank) if v.rank is not None else "-",
                human(v.anon_rss_bytes),
                human(v.file_rss_bytes),
                human(v.shmem_rss_bytes),
                v.cgroup or "-",
                v.source,
            ]
        )
    return rows


VICTIM_HEADER = [
    "pid",
    "name",
    "role",
    "rank",
    "anon-rss",
    "file-rss",
    "shmem-rss",
    "cgroup",
    "from",
]


def first_failure_line(d: Diagnosis) -> str | None:
    """``First failure: rank 3 on node-1 was killed by the kernel at 18:45:19; 3 ranks on 2 nodes
    failed after it``, when the inputs show more than one process failing."""
    return f"First failure: {d.timeline.headline()}" if d.timeline is not None else None


def _failure_row(f: Failure) -> list[str]:
    where = f"{_where(f.evidence[0])}" if f.evidence else "-"
    return [f.time or "?", f.who(), f.says, where]


def _timeline_text(d: Diagnosis) -> list[str]:
    """One row per failure, the first first: time, who, what, where it is said."""
    t = d.timeline
    if t is None:
        return []
    rows = [_failure_row(f) for f in (t.first, *t.after)]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = [f"Timeline (ordered by {t.ordered_by}):"]
    for i, r in enumerate(rows):
        mark = "first" if i == 0 else "after"
        out.append(f"  {mark}  " + "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + f"  {r[3]}")
    out.extend(f"  - {n}" for n in t.notes)
    out.append("")
    return out


def render_text(d: Diagnosis) -> str:
    first = first_failure_line(d)
    out = [*([first, ""] if first else []), _headline(d), "", d.summary, ""]
    if d.victims:
        rows = [VICTIM_HEADER, *_victim_rows(d)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(VICTIM_HEADER))]
        out.append("Victims:")
        for r in rows:
            out.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip())
        out.append("")
    if d.evidence:
        out.append("Evidence:")
        out.extend(f"  {_where(e)}: {_clip(e.text)}" for e in d.evidence)
        out.append("")
    out.extend(_timeline_text(d))
    if d.cause_determined is not False:
        for i, c in enumerate(d.causes, 1):
            out.extend(_cause_text(i, c))
    else:
        out.extend(_undetermined_text(d))
    if d.notes:
        out.append("Notes:")
        out.extend(f"  - {n}" for n in d.notes)
        out.append("")
    if d.next_steps:
        out.append("Next steps:")
        out.extend(f"  - {s}" for s in d.next_steps)
        out.append("")
    read = ", ".join(f"{i.file} ({i.lines} lines)" for i in d.inputs)
    out.append(f"Read: {read}")
    return "\n".join(escape_controls(line) for line in out) + "\n"


def _split(d: Diagnosis) -> tuple[list[Cause], Cause | None]:
    """(the candidate causes, the fallback that says what to collect)."""
    candidates = [c for c in d.causes if c.id != "unknown"]
    return candidates, next((c for c in d.causes if c.id == "unknown"), None)


def undetermined_line(d: Diagnosis) -> str:
    candidates, _ = _split(d)
    if not candidates:
        return "Cause: not determined from this evidence: nothing in it points to a known mechanism."
    named = ", ".join(f"{c.id} ({c.confidence:.2f})" for c in candidates[:3])
    return f"Cause: not determined from this evidence: it fits more than one cause, or too weakly ({named})."


def _undetermined_text(d: Diagnosis) -> list[str]:
    candidates, collect = _split(d)
    out = [undetermined_line(d), ""]
    for i, c in enumerate(candidates, 1):
        out.extend(_cause_text(i, c, "Candidate"))
    if collect is not None and collect.reasons:
        out.append("To tell the causes apart, collect:")
        out.extend(f"  - {r.removeprefix('collect ')}" for r in collect.reasons)
        out.append("")
    return out


def _cause_text(i: int, c: Cause, label: str = "Why") -> list[str]:
    head = f"{label} ({i}): {c.title} [{c.id}, confidence {c.confidence:.2f}]"
    out = [head]
    out.extend(f"  {line}" for line in textwrap.wrap(c.mechanism, 96))
    out.extend(f"  - {r}" for r in c.reasons)
    out.extend(f"    {_where(e)}: {_clip(e.text)}" for e in c.evidence)
    if c.fix.strip():
        out.append("Fix:")
        out.extend(f"    {line}" for line in c.fix.splitlines())
    out.append("Confirm:")
    out.extend(f"  {line}" for line in textwrap.wrap(c.confirm, 96))
    if c.references:
        out.append("See: " + " ".join(c.references))
    out.append("")
    return out


def _md_evidence(evidence: tuple[Evidence, ...]) -> list[str]:
    return code_fence(f"{_where(e)}: {_clip(e.text)}" for e in evidence)


def _cause_markdown(i: int, c: Cause, label: str = "Why") -> list[str]:
    md = markdown_text
    out = [f"**{label} ({i}): {md(c.title)}** — {code_span(c.id)}, confidence {c.confidence:.2f}", "",
           md(c.mechanism), ""]  # fmt: skip
    out.extend(f"- {md(r)}" for r in c.reasons)
    if c.reasons:
        out.append("")
    if c.evidence:
        out.extend(_md_evidence(c.evidence))
    if c.fix.strip():
        out.extend(["Fix:", "", *code_fence(c.fix.split("\n"), "python"), ""])
    out.extend([f"Confirm: {md(c.confirm)}", ""])
    if c.references:
        out.extend(["See: " + ", ".join(md(r) for r in c.references), ""])
    return out


def _timeline_markdown(d: Diagnosis) -> list[str]:
    t = d.timeline
    if t is None:
        return []
    md = markdown_text
    head = ["| | time | who | what | where |", "|---|---|---|---|---|"]
    out = [f"**Timeline** (ordered by {md(t.ordered_by)})", "", *head]
    for i, f in enumerate((t.first, *t.after)):
        cells = [md(c).replace("|", "\\|") for c in _failure_row(f)[:3]]
        where = code_span(_where(f.evidence[0])) if f.evidence else "-"
        out.append(f"| {'first' if i == 0 else 'after'} | {' | '.join(cells)} | {where} |")
    out.append("")
    out.extend(f"> {md(n)}" for n in t.notes)
    if t.notes:
        out.append("")
    return out


def render_markdown(d: Diagnosis) -> str:
    md = markdown_text
    first = first_failure_line(d)
    out = [*([f"**{md(first)}**", ""] if first else []), f"### oomwatch: {md(_headline(d))}", "", md(d.summary), ""]
    if d.victims:
        out.append("| " + " | ".join(VICTIM_HEADER) + " |")
        out.append("|" + "---|" * len(VICTIM_HEADER))
        for r in _victim_rows(d):
            out.append("| " + " | ".join(md(c).replace("|", "\\|") for c in r) + " |")
        out.append("")
    if d.evidence:
        out.append("<details><summary>Evidence</summary>")
        out.append("")
        out.extend(_md_evidence(d.evidence))
        out.append("</details>")
        out.append("")
    out.extend(_timeline_markdown(d))
    if d.cause_determined is not False:
        for i, c in enumerate(d.causes, 1):
            out.extend(_cause_markdown(i, c))
    else:
        candidates, collect = _split(d)
        out.extend([f"**{md(undetermined_line(d))}**", ""])
        for i, c in enumerate(candidates, 1):
            out.extend(_cause_markdown(i, c, "Candidate"))
        if collect is not None and collect.reasons:
            out.extend(["To tell the causes apart, collect:", ""])
            out.extend(f"- {md(r.removeprefix('collect '))}" for r in collect.reasons)
            out.append("")
    if d.notes:
        out.extend(f"> {md(n)}" for n in d.notes)
        out.append("")
    if d.next_steps:
        out.append("**Next steps**")
        out.append("")
        out.extend(f"- {md(s)}" for s in d.next_steps)
        out.append("")
    out.append(f"_Read: {', '.join(f'{code_span(i.file)} ({i.lines} lines)' for i in d.inputs)}_")
    return "\n".join(out) + "\n"


RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown}
