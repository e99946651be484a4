"""Render a Diagnosis: text for a person, JSON for machines, Markdown for an issue.

Data in, text out; deterministic (no clock, no terminal queries: the text's width is an argument,
which the command line takes from the terminal, see :func:`oomwatch.render.layout.output_width`). Text
wraps to that width and cuts nothing a person needs (an absurd line aside, and it says so);
Markdown cuts nothing: tables and fences may be as wide as the log. Text and Markdown quote logs,
process names and job names: control characters in them are shown as escapes (``\\x1b``, see
:mod:`oomwatch.textsafe`), and Markdown renders no HTML from them. JSON keeps them as data.
"""

from __future__ import annotations

import json

from oomwatch.engine.clock import moment
from oomwatch.engine.diagnosis import Diagnosis
from oomwatch.engine.model import Cause, Evidence, OomReport
from oomwatch.engine.sizes import human
from oomwatch.engine.timeline import Failure
from oomwatch.engine.verdicts import HEADLINES  # each verdict's headline (engine.verdicts.TABLE)
from oomwatch.render.layout import NOT_A_TERMINAL, clip_quote, code, quote, table, wrap
from oomwatch.textsafe import code_fence, code_span, escape_controls, markdown_text


def render_json(d: Diagnosis) -> str:
    return json.dumps(d.to_json(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def _headline(d: Diagnosis) -> str:
    status = "confirmed" if d.confirmed else "not confirmed"
    return f"{HEADLINES.get(d.verdict, d.verdict)} [{d.verdict}, {status}]"


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


TIMELINE_HEADER = ["", "time", "who", "what", "where"]


def _timeline_text(d: Diagnosis, width: int) -> list[str]:
    """One row per failure, the first first: time, who, what, where it is said."""
    t = d.timeline
    if t is None:
        return []
    esc = escape_controls
    rows = [[("first" if i == 0 else "after"), *(esc(c) for c in _failure_row(f))]
            for i, f in enumerate((t.first, *t.after))]  # fmt: skip
    out = wrap(f"Timeline (ordered by {esc(t.ordered_by)}):", width)
    out.extend(table(TIMELINE_HEADER, rows, width))
    for n in t.notes:
        out.extend(wrap(esc(n), width, "  - "))
    out.append("")
    return out


def render_text(d: Diagnosis, width: int = NOT_A_TERMINAL) -> str:
    """``d`` for a person, every line at most ``width`` columns (``width`` below 40 is taken as 40)."""
    width = max(width, 40)
    esc = escape_controls

    def para(text: str, first: str = "", rest: str | None = None) -> list[str]:
        return wrap(esc(text), width, first, rest)

    first = first_failure_line(d)
    out = [*([*para(first), ""] if first else []), *para(_headline(d)), "", *para(d.summary), ""]
    if d.victims:
        out.append("Victims:")
        out.extend(table(VICTIM_HEADER, [[esc(c) for c in r] for r in _victim_rows(d)], width))
        out.append("")
    if d.evidence:
        out.append("Evidence:")
        for e in d.evidence:
            out.extend(quote(esc(_where(e)), esc(e.text), width))
        out.append("")
    out.extend(_timeline_text(d, width))
    if d.cause_determined is not False:
        for i, c in enumerate(d.causes, 1):
            out.extend(_cause_text(i, c, width))
    else:
        out.extend(_undetermined_text(d, width))
    out.extend(_aside_text(d, width))
    if d.notes:
        out.append("Notes:")
        for n in d.notes:
            out.extend(para(n, "  - "))
        out.append("")
    if d.next_steps:
        out.append("Next steps:")
        for s in d.next_steps:
            out.extend(para(s, "  - "))
        out.append("")
    read = ", ".join(f"{i.file} ({i.lines} lines)" for i in d.inputs)
    out.extend(para(f"Read: {read}", rest="  "))
    return "\n".join(escape_controls(line) for line in out) + "\n"


MAX_OTHER_KILLS = 10  # kills set aside shown in text and Markdown (the latest); JSON has every one


def _when(time: str | None) -> str:
    if not time:
        return "time not given"
    t = moment(time)
    return f"{t[1]:.0f} s after boot" if t is not None and t[0] == "uptime" else time


def _latest_others(d: Diagnosis) -> tuple[list[OomReport], str]:
    shown = list(d.other_kills[-MAX_OTHER_KILLS:])
    more = len(d.other_kills) - len(shown)
    return shown, (f"and {more} more before these (JSON other_kills lists every one)" if more else "")


def _other_kill(r: OomReport) -> str:
    """One kill set aside, in a line: when, whom, where, under which limit."""
    parts = [_when(r.time), f"pid {r.dead_pid}" + (f" ({r.dead_name})" if r.dead_name else "")]
    if r.anon_rss_bytes is not None:
        parts.append(f"{human(r.anon_rss_bytes)} anonymous")
    cgroup = r.oom_memcg or r.task_memcg
    if r.constraint == "memcg" or r.oom_memcg:
        limit = f", limit {human(r.memcg_limit_bytes)}" if r.memcg_limit_bytes is not None else ""
        parts.append(f"cgroup {cgroup or '(not named)'}{limit}")
    else:
        parts.append("host RAM" + (f", in {cgroup}" if cgroup else ""))
    if r.host:
        parts.append(f"host {r.host}")
    return ", ".join(parts) + f" [{r.file}:{r.last_line}]"


def _aside_text(d: Diagnosis, width: int) -> list[str]:
    esc = escape_controls
    out: list[str] = []
    if d.other_kills:
        shown, more = _latest_others(d)
        out.extend(wrap("Other OOM kills in these inputs (not this failure's):", width))
        for r in shown:
            out.extend(wrap(esc(_other_kill(r)), width, "  - ", quoted=True))
        if more:
            out.extend(wrap(more, width, "  - "))
        out.append("")
    if d.set_aside:
        out.extend(wrap("Inputs set aside (another failure's; `oomwatch diagnose --each` reads each alone):", width))
        for f, why in d.set_aside:
            out.extend(wrap(esc(f"{f}: {why}"), width, "  - ", quoted=True))
        out.append("")
    return out


def _aside_markdown(d: Diagnosis) -> list[str]:
    md = markdown_text
    out: list[str] = []
    if d.other_kills:
        out.extend(["**Other OOM kills in these inputs** (not this failure's)", ""])
        shown, more = _latest_others(d)
        out.extend(f"- {md(_other_kill(r))}" for r in shown)
        if more:
            out.append(f"- {md(more)}")
        out.append("")
    if d.set_aside:
        out.extend(["**Inputs set aside** (another failure's; `oomwatch diagnose --each` reads each alone)", ""])
        out.extend(f"- {code_span(f)}: {md(why)}" for f, why in d.set_aside)
        out.append("")
    return out


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


def _undetermined_text(d: Diagnosis, width: int) -> list[str]:
    candidates, collect = _split(d)
    out = [*wrap(escape_controls(undetermined_line(d)), width, rest="  "), ""]
    for i, c in enumerate(candidates, 1):
        out.extend(_cause_text(i, c, width, "Candidate"))
    if collect is not None and collect.reasons:
        out.append("To tell the causes apart, collect:")
        for r in collect.reasons:
            out.extend(wrap(escape_controls(r.removeprefix("collect ")), width, "  - "))
        out.append("")
    return out


def _cause_text(i: int, c: Cause, width: int, label: str = "Why") -> list[str]:
    esc = escape_controls
    out = wrap(esc(f"{label} ({i}): {c.title} [{c.id}, confidence {c.confidence:.2f}]"), width, rest="  ")
    out.extend(wrap(esc(c.mechanism), width, "  "))
    for r in c.reasons:
        out.extend(wrap(esc(r), width, "  - "))
    for e in c.evidence:
        out.extend(quote(esc(_where(e)), esc(e.text), width, "    "))
    if c.fix.strip():
        out.append("Fix:")
        out.extend(code([esc(line) for line in c.fix.splitlines()], width))
    out.append("Confirm:")
    out.extend(wrap(esc(c.confirm), width, "  "))
    if c.references:
        out.extend(wrap(" ".join(esc(r) for r in c.references), width, "See: ", "  "))
    out.append("")
    return out


def _md_evidence(evidence: tuple[Evidence, ...]) -> list[str]:
    return code_fence(f"{_where(e)}: {clip_quote(e.text)}" for e in evidence)


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
    out.extend(_aside_markdown(d))
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


def render(fmt: str, d: Diagnosis, width: int = NOT_A_TERMINAL) -> str:
    """``d`` in format ``fmt``; ``width`` is the text's (JSON and Markdown have none)."""
    return render_text(d, width) if fmt == "text" else RENDERERS[fmt](d)


def render_each(results: list[Diagnosis], fmt: str, width: int = NOT_A_TERMINAL) -> str:
    """``diagnose --each``: JSON a list of Diagnoses; text and Markdown a section per input."""
    if fmt == "json":
        return json.dumps([d.to_json() for d in results], indent=2, ensure_ascii=False) + "\n"
    parts = []
    for d in results:
        name = ", ".join(i.file for i in d.inputs) or "(no input)"
        title = f"=== {escape_controls(name)} ===" if fmt == "text" else f"## {code_span(name)}"
        parts.append(f"{title}\n\n{render(fmt, d, width)}")
    return "\n".join(parts)
