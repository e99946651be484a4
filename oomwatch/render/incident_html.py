"""An incident as one self-contained HTML page (``oomwatch incidents show ID --html FILE``).

The page needs nothing but itself: inline CSS, inline SVG charts, no script, no font, image or
link to anything else, and a Content-Security-Policy that forbids loading anything even if some
text got through as markup. Everything that comes from the incident (comm names, cgroup paths,
kernel lines, the diagnosis) is escaped: a process chooses its own comm.

Charts: per-process anonymous RSS (RSS where anon is unknown) with the cgroup's usage and its limit
(effective limit, else limit) as a dashed line labelled with its value; then per-process USS (what
copy-on-write sharing defeated shows in) on its own scale; each line coloured by role, and the kill
as a vertical line labelled with the victim. x is seconds relative to the kill: the incident's
``time`` minus ``latency_seconds`` (``time`` when the latency is unknown).
"""

from __future__ import annotations

import time
from typing import Any

from oomwatch.render.incident_chart import charts_html
from oomwatch.render.incident_text import is_oom_kill
from oomwatch.render.incident_values import (
    ROLE_STYLES,
    _dict,
    _num,
    _process_series,
    _role_label,
    _rows,
    _size,
    _text,
    _time,
    _victim_role,
    kill_time,
)

_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _process_table(doc: dict[str, Any]) -> str:
    history = _dict(doc.get("history"))
    rows = _rows(history.get("processes"))
    if not rows:
        return ""
    series = _process_series(rows, 0.0, _dict(doc.get("victim")).get("pid"))

    def span(points: list[tuple[float, float | None]]) -> tuple[str, float]:
        vals = [v for _, v in points if v is not None]
        if not vals:
            return "-", -1.0
        return f"{_size(vals[0])} \u2192 {_size(max(vals))} \u2192 {_size(vals[-1])}", max(vals)

    body = []
    for s in sorted(series, key=lambda s: (not s.victim, -span(s.anon)[1])):
        colour = ROLE_STYLES[s.key][0]
        body.append(
            ('<tr class="victim">' if s.victim else "<tr>") + f'<td class="num">{_text(s.pid)}</td>'
            f"<td><code>{_text(s.comm)}</code></td>"
            f'<td><span class="swatch" style="background:{colour}"></span>{_text(_role_label(s.role, s.rank))}</td>'
            f'<td class="num">{_text(span(s.anon)[0])}</td><td class="num">{_text(span(s.uss)[0])}</td></tr>'
        )
    return (
        f"<section><h2>Processes ({len(series)})</h2>"
        '<table class="processes"><thead><tr><th>PID</th><th>comm</th><th>role</th>'
        "<th>anon RSS: first \u2192 peak \u2192 last</th><th>USS: first \u2192 peak \u2192 last</th></tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></section>"
    )


def _utc(t: float | None) -> str:
    try:
        return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
    except (OverflowError, OSError, ValueError):  # a time no calendar holds
        return "-"


def _header(doc: dict[str, Any]) -> str:
    victim = _dict(doc.get("victim"))
    diag = _dict(doc.get("diagnosis"))
    written = _time(doc.get("time"))
    kill = kill_time(doc)
    role = _role_label(*_victim_role(doc))
    facts = [
        ("verdict", f"{diag.get('verdict') or '-'}" + (" (confirmed)" if diag.get("confirmed") else "")),
        ("job", victim.get("job") or "-"),
        ("killed", _utc(kill)),
    ]
    latency = _num(doc.get("latency_seconds"))
    if written is not None and latency is not None:
        facts.append(("recorded", f"{latency:.2f} s after the kill"))
    cgroups = [str(v.get("cgroup")) for v in _rows(diag.get("victims")) if v.get("cgroup")]
    if cgroups:
        facts.append(("cgroup", cgroups[0]))
    title = "OOM kill" if is_oom_kill(doc) else "SIGKILL"
    out = [
        f'<p class="kicker">oomwatch incident <code>{_text(doc.get("id"))}</code></p>',
        f"<h1>{title}: pid {_text(victim.get('pid'))} <code>{_text(victim.get('comm'))}</code>"
        f' <span class="role">{_text(role)}</span></h1>',
        '<dl class="facts">'
        + "".join(f"<div><dt>{_text(k)}</dt><dd>{_text(v)}</dd></div>" for k, v in facts)
        + "</dl>",
        f'<p class="summary">{_text(diag.get("summary") or "No diagnosis summary.")}</p>',
    ]
    causes = _rows(diag.get("causes"))
    candidates = [c for c in causes if c.get("id") != "unknown"]
    if causes and not diag.get("cause_determined", True):
        named = ", ".join(
            f"{c.get('title') or c.get('id')} ({_num(c.get('confidence')) or 0:.0%})" for c in candidates[:3]
        )
        cause = ["<h2>Cause: not determined from this evidence</h2>"]
        cause.append(f'<p class="others">Candidates: {_text(named)}</p>' if named else
                     '<p class="others">Nothing in the evidence points to a known mechanism.</p>')  # fmt: skip
        collect = [str(r).removeprefix("collect ") for c in causes if c.get("id") == "unknown"
                   for r in c.get("reasons") or []]  # fmt: skip
        if collect:
            items = "".join(f"<li>{_text(x)}</li>" for x in collect)
            cause.append(f'<h3>To tell the causes apart, collect</h3><ul class="collect">{items}</ul>')
        out.append('<section class="cause">' + "".join(cause) + "</section>")
    elif causes:
        top = causes[0]
        conf = _num(top.get("confidence"))
        conf_text = f' <span class="confidence">confidence {conf:.0%}</span>' if conf is not None else ""
        cause = [f"<h2>Most likely cause: {_text(top.get('title') or top.get('id'))}{conf_text}</h2>"]
        if top.get("fix"):
            cause.append(f'<h3>Fix</h3><pre class="fix">{_text(top.get("fix"))}</pre>')
        if top.get("confirm"):
            cause.append(f'<p class="confirm"><b>Confirm:</b> {_text(top.get("confirm"))}</p>')
        if len(causes) > 1:
            others = ", ".join(str(c.get("title") or c.get("id")) for c in causes[1:])
            cause.append(f'<p class="others">Also possible: {_text(others)}</p>')
        out.append('<section class="cause">' + "".join(cause) + "</section>")
    return "<header>" + "\n".join(out) + "</header>"


_STYLE = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; padding: 20px 28px 40px; font: 14px/1.45 "DejaVu Sans", Helvetica, Arial, sans-serif;
       color: #1f2328; background: #fff; max-width: 1240px; }
code, pre { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
h1 { font-size: 21px; margin: 2px 0 8px; }
h1 .role { font-weight: normal; color: #555; font-size: 17px; }
h2 { font-size: 16px; margin: 18px 0 6px; }
h3 { font-size: 13px; margin: 8px 0 4px; color: #444; }
.kicker { margin: 0; color: #666; font-size: 12px; }
.facts { display: flex; flex-wrap: wrap; gap: 4px 22px; margin: 0 0 8px; }
.facts div { display: flex; gap: 6px; }
.facts dt { color: #666; }
.facts dd { margin: 0; font-weight: bold; word-break: break-all; }
.summary { margin: 6px 0 10px; max-width: 110ch; }
.cause { border: 1px solid #e1e4e8; border-left: 4px solid #888; border-radius: 4px; padding: 4px 14px 8px;
         background: #fafbfc; }
.cause h2 { margin-top: 6px; }
.confidence { font-weight: normal; color: #666; font-size: 13px; }
pre { background: #f5f6f8; border: 1px solid #e1e4e8; border-radius: 4px; padding: 8px 10px; margin: 0;
      overflow-x: auto; white-space: pre; }
.confirm, .others { margin: 6px 0 0; font-size: 13px; }
.legend { list-style: none; display: flex; flex-wrap: wrap; gap: 4px 18px; padding: 0; margin: 6px 0 2px; }
.legend li { display: flex; align-items: center; gap: 6px; }
.swatch { display: inline-block; width: 18px; height: 3px; vertical-align: middle; margin-right: 6px; }
.legend .swatch { margin-right: 0; }
.swatch.thick { height: 5px; }
.swatch.dashed { height: 0; border-top: 2px dashed; background: none; }
.swatch.vertical { width: 2px; height: 14px; }
figure.chart-figure { margin: 10px 0 4px; }
figcaption { font-weight: bold; font-size: 13px; margin-left: 6px; }
svg.chart { display: block; width: 100%; height: auto; margin: 2px 0 0; }
svg.chart text { paint-order: stroke; stroke: #fff; stroke-width: 3px; stroke-linejoin: round; }
.note, .no-history { color: #555; font-style: italic; }
.no-history { border: 1px dashed #c8ccd2; padding: 14px; border-radius: 4px; }
table.processes { border-collapse: collapse; font-size: 13px; }
table.processes th, table.processes td { padding: 3px 10px; border-bottom: 1px solid #eceef1; text-align: left; }
table.processes td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.processes tr.victim { background: #fff4e5; font-weight: bold; }
pre.kernel { font-size: 11.5px; line-height: 1.35; max-height: 560px; overflow: auto; }
footer { margin-top: 18px; color: #777; font-size: 12px; }
"""


def render_incident_html(doc: dict[str, Any]) -> str:
    """The incident ``doc`` (an ``oomwatch.incident/v1`` document) as one self-contained HTML page."""
    doc = _dict(doc)
    history = _dict(doc.get("history"))
    kernel = doc.get("kernel_lines")
    kernel_lines = [str(x) for x in kernel] if isinstance(kernel, list) else []
    victim = _dict(doc.get("victim"))
    title = f"OOM kill of pid {victim.get('pid')} ({victim.get('comm')}): {doc.get('id')}"
    body = [
        _header(doc),
        f'<section class="charts"><h2>Memory before the kill</h2>{charts_html(doc)}</section>',
        _process_table(doc),
        f'<section><h2>The kernel\'s report ({len(kernel_lines)} lines)</h2><pre class="kernel">'
        + _text("\n".join(kernel_lines) or "(no kernel lines)")
        + "</pre></section>",
        f"<footer>History: {_text(history.get('source') or '-')}. Written by oomwatch; "
        f"schema {_text(doc.get('schema') or '-')}.</footer>",
    ]
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_text(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body>\n</html>\n"
    )


def _named(cause: dict[str, Any]) -> str:
    """A candidate cause with its confidence: "Every rank loads the checkpoint (35%)"."""
    return f"{cause.get('title') or cause.get('id')} ({_num(cause.get('confidence')) or 0:.0%})"
