"""``oomwatch estimate``'s answer: the host memory one node of the job needs at the asked scale (with an
interval), the share by role and by mechanism (what each fix would take off), whether it fits the limit, and
what each fix would make of it; as text for a person, Markdown for an issue, or JSON (``oomwatch.estimate/v1``)
for a machine."""

from __future__ import annotations

import json
from typing import Any

from oomwatch.engine.sizes import human as _human
from oomwatch.estimate.model import Model
from oomwatch.estimate.project import Projection, WhatIf
from oomwatch.estimate.steps import StepClock
from oomwatch.render.layout import NOT_A_TERMINAL, table, wrap
from oomwatch.textsafe import escape_controls, markdown_text

SCHEMA = "oomwatch.estimate/v1"


def human(n: float | None) -> str:
    return _human(None if n is None else round(n))


ROLE_NAMES = {"launcher": "launcher", "rank": "ranks", "rank0": "rank 0", "dataloader_worker": "DataLoader workers",
              "manager": "managers", "other": "other processes"}  # fmt: skip
VERDICTS = {"fits": "fits", "tight": "may not fit (it fits at the estimate; its interval reaches the limit)",
            "over": "does NOT fit",
            "unknown": "cannot tell (it still grew where the samples end and no training step was counted: "
                       "loading and accumulating look alike, and what its training holds was not seen; measure "
                       "a run that reaches its training steps)"}  # fmt: skip


def _scale(p: Projection) -> str:
    s = p.scale
    nodes = f" on {s.nodes} nodes ({s.ranks_per_node} ranks a node)" if s.nodes > 1 else ""
    ranks = f"{s.ranks} rank{'s' if s.ranks != 1 else ''}"
    workers = f" × {s.workers} DataLoader worker{'s' if s.workers != 1 else ''}" if s.workers else ""
    return f"{ranks}{workers}{nodes}"


def _fit_line(p: Projection) -> str | None:
    if p.limit is None or p.verdict is None:
        return None
    line = f"Against the limit of {human(p.limit)}: {VERDICTS[p.verdict]}"
    if p.seconds_to_limit is not None:
        if p.limit_by_then:  # reached inside what was measured: when exactly, the samples do not say
            line += (f"; it needs the limit already by {p.seconds_to_limit:.0f} s into the run (where the "
                     "measured growth ends)")  # fmt: skip
            at = "by"
        else:
            line += f"; it grows into the limit about {p.seconds_to_limit:.0f} s into the run"
            at = "at about"
        if p.step_at_limit is not None:
            line += f", {at} step {p.step_at_limit:.0f}"
            if p.scale.steps is not None:
                line += f" of {p.scale.steps}"
    return line + "."


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _steps_said(steps: StepClock | None) -> str:
    if steps is None:
        return ""
    return f"; steps {steps.first[1]}–{steps.last[1]} at {steps.rate:.3g} steps/s"


def render_text(
    model: Model, p: Projection, what_ifs: list[WhatIf], source: str, width: int = NOT_A_TERMINAL,
    steps: StepClock | None = None,
) -> str:  # fmt: skip
    out = [
        f"HOST MEMORY ESTIMATE for {_scale(p)}, per node",
        "",
        *wrap(
            f"Needs {human(p.needed)} that cannot be reclaimed (interval {human(p.low)} – {human(p.high)}); "
            f"{human(p.with_cache)} with the page cache its files fill.",
            width,
        ),
    ]
    fit = _fit_line(p)
    if fit:
        out += wrap(fit, width)
    out += ["", "By role (each at its peak):"]
    rows = [[ROLE_NAMES.get(s.role, s.role), str(s.count), human(s.each), human(s.total)] for s in p.shares]
    rows.append(["shared pages", "", "", human(p.shared_once)])
    rows.append(["page cache", "", "", human(p.page_cache)])
    out += table(["", "count", "each", "total"], rows, width, indent="  ", right=(1, 2, 3))
    if what_ifs:
        out += ["", "By mechanism (what each fix would take off the estimate, each on its own; they may overlap):"]
        rows = [[w.cause, human(w.takes(p)), _percent(w.share(p))] for w in what_ifs]
        out += table(["", "holds", "of the estimate"], rows, width, indent="  ", right=(1, 2))
    for w in what_ifs:
        fits = f"; against the limit: {VERDICTS[w.projection.verdict]}" if w.projection.verdict else ""
        line = (f"With {w.change} [{w.cause}]: needs {human(w.projection.needed)} "
                f"({human(w.projection.low)} – {human(w.projection.high)}){fits}.")  # fmt: skip
        out += ["", *wrap(line, width)]
    measured = (f"Measured in {escape_controls(source)} ({model.seconds:.0f} s sampled): {model.ranks} rank(s), "
                f"{model.workers_per_rank:g} worker(s) a rank; peak {human(model.measured_peak)}, "
                f"{human(model.measured_needed)} not reclaimable{_steps_said(steps)}.")  # fmt: skip
    out += ["", *wrap(measured, width), "Assumptions:"]
    for a in [*p.assumptions, *(f"{w.cause}: {w.assumption}" for w in what_ifs if w.assumption)]:
        out += wrap(f"- {a}", width, rest="  ")
    return "\n".join(out) + "\n"


def render_markdown(
    model: Model, p: Projection, what_ifs: list[WhatIf], source: str, steps: StepClock | None = None
) -> str:
    lines = [f"### Host memory estimate: {_scale(p)}, per node", "",
             f"**Needs {human(p.needed)}** not reclaimable (interval {human(p.low)} – {human(p.high)}); "
             f"{human(p.with_cache)} with page cache."]  # fmt: skip
    fit = _fit_line(p)
    if fit:
        lines += ["", fit]
    lines += ["", "| role | count | each | total |", "|---|---:|---:|---:|"]
    for s in p.shares:
        lines.append(f"| {ROLE_NAMES.get(s.role, s.role)} | {s.count} | {human(s.each)} | {human(s.total)} |")
    lines.append(f"| shared pages | | | {human(p.shared_once)} |")
    lines.append(f"| page cache | | | {human(p.page_cache)} |")
    if what_ifs:
        lines += ["", "| mechanism (what its fix takes off, on its own) | holds | of the estimate |", "|---|---:|---:|"]
        lines += [f"| `{w.cause}` | {human(w.takes(p))} | {_percent(w.share(p))} |" for w in what_ifs]
    for w in what_ifs:
        fits = f"; against the limit: {VERDICTS[w.projection.verdict]}" if w.projection.verdict else ""
        lines += [
            "",
            f"With the fix for `{w.cause}` ({markdown_text(w.change)}): needs {human(w.projection.needed)}{fits}.",
        ]
    lines += ["", f"Measured in {markdown_text(source)} ({model.seconds:.0f} s sampled{_steps_said(steps)}).", "",
              "Assumptions:", ""]  # fmt: skip
    lines += [f"- {markdown_text(a)}" for a in p.assumptions]
    return "\n".join(lines) + "\n"


def _projection_json(p: Projection) -> dict[str, Any]:
    return {
        "ranks": p.scale.ranks, "workers": p.scale.workers, "nodes": p.scale.nodes,
        "duration_seconds": p.scale.seconds, "steps": p.scale.steps,
        "needed_bytes": round(p.needed), "low_bytes": round(p.low), "high_bytes": round(p.high),
        "with_cache_bytes": round(p.with_cache), "shared_once_bytes": round(p.shared_once),
        "page_cache_bytes": round(p.page_cache),
        "by_role": [{"role": s.role, "count": s.count, "each_bytes": round(s.each), "total_bytes": round(s.total)}
                    for s in p.shares],
        "limit_bytes": p.limit, "verdict": p.verdict,
        "seconds_to_limit": None if p.seconds_to_limit is None else round(p.seconds_to_limit, 1),
        "step_at_limit": None if p.step_at_limit is None else round(p.step_at_limit),
        "limit_by_then": p.limit_by_then,
        "assumptions": list(p.assumptions),
    }  # fmt: skip


def _what_if_json(w: WhatIf, p: Projection) -> dict[str, Any]:
    share = w.share(p)
    return {
        "cause": w.cause,
        "fix": w.change,
        "assumption": w.assumption,
        "holds_bytes": round(w.takes(p)),
        "share": None if share is None else round(share, 4),
        "projection": _projection_json(w.projection),
    }


def render_json(
    model: Model, p: Projection, what_ifs: list[WhatIf], source: str, steps: StepClock | None = None
) -> str:
    doc = {
        "schema": SCHEMA,
        "source": source,
        "measured": {
            "seconds": round(model.seconds, 1), "ranks": model.ranks, "workers_per_rank": model.workers_per_rank,
            "peak_bytes": model.measured_peak, "needed_bytes": model.measured_needed, "basis": model.basis,
            "roles": [{"role": r.role, "per": r.per, "seen": r.seen, "peak_bytes": round(r.peak),
                       "low_bytes": round(r.low), "high_bytes": round(r.high), "step_bytes": round(r.step),
                       "start_bytes": round(r.start), "growth_bytes_per_second": round(r.growth, 1),
                       "settled": r.settled} for _, r in sorted(model.roles.items())],
            "steps": None if steps is None else {"steps_per_second": round(steps.rate, 4), "first": steps.first[1],
                                                 "last": steps.last[1], "rule": steps.rule},
        },
        "projection": _projection_json(p),
        "what_if": [_what_if_json(w, p) for w in what_ifs],
    }  # fmt: skip
    return json.dumps(doc, indent=2) + "\n"
