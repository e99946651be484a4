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

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from oomwatch.agent.incidents.writer import is_oom_kill
from oomwatch.engine.sizes import human
from oomwatch.sharedfile import write_for_people

# role -> (colour, legend label); unknown and other share a colour (a process the rules could not place)
ROLE_STYLES: dict[str, tuple[str, str]] = {
    "launcher": ("#7b3fbf", "launcher"),
    "rank": ("#1f6fd1", "rank"),
    "dataloader_worker": ("#e8710a", "DataLoader worker"),
    "manager": ("#1e9e4a", "manager"),
    "unknown": ("#0e9aa7", "unknown"),
    "other": ("#0e9aa7", "other"),
}
USAGE_COLOUR = "#3b4252"
LIMIT_COLOUR = "#d62728"
KILL_COLOUR = "#111111"

# the chart's geometry, in SVG user units (the SVG scales to the page's width)
_W, _H = 1000, 270
_LEFT, _RIGHT, _TOP, _BOTTOM = 78, 24, 26, 42
_FAR_LIMIT = 4.0  # a limit more than this many times the largest sample is noted, not drawn to scale

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _text(value: Any) -> str:
    """Escaped text of any value (None as an empty string)."""
    return "" if value is None else escape(str(value), quote=True)


def _time(value: Any) -> float | None:
    """A finite number, or None (missing, not a number, absurd)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        f = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return f if math.isfinite(f) else None


def _num(value: Any) -> float | None:
    """A size or a duration: a finite, non-negative number, or None."""
    f = _time(value)
    return f if f is not None and f >= 0 else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _rows(value: Any) -> list[dict[str, Any]]:
    return [r for r in value if isinstance(r, dict)] if isinstance(value, list) else []


def _size(n: float | None) -> str:
    """A size as the text report prints it (1.5 GiB), with PiB and EiB beyond its TiB."""
    if n is None:
        return "-"
    if n < 1024**5:
        return human(int(n))
    value, unit = n / 1024**5, "PiB"
    if value >= 1024:
        value, unit = value / 1024, "EiB"
    return f"{value:.1f} {unit}"


def role_key(role: Any) -> str:
    """The role's CSS class suffix: one of ROLE_STYLES, anything unexpected as ``other``."""
    return role if isinstance(role, str) and role in ROLE_STYLES else ("unknown" if role is None else "other")


def _role_label(role: Any, rank: Any) -> str:
    if role is None:
        label = "role unknown"
    else:
        label = ROLE_STYLES[role][1] if isinstance(role, str) and role in ROLE_STYLES else str(role)
    return label + (f" {rank}" if rank is not None and role == "rank" else "")


def _victim_role(doc: dict[str, Any]) -> tuple[Any, Any]:
    """The victim's role and rank as the agent saw them live, else as the diagnosis placed them."""
    victim = _dict(doc.get("victim"))
    if victim.get("role") is not None:
        return victim.get("role"), victim.get("rank")
    for v in _rows(_dict(doc.get("diagnosis")).get("victims")):
        if v.get("pid") == victim.get("pid") and v.get("role") is not None:
            return v.get("role"), v.get("rank")
    return None, None


def kill_time(doc: dict[str, Any]) -> float | None:
    """When the kernel killed the victim, in epoch seconds: the incident's time less its latency."""
    written = _time(doc.get("time"))
    if written is None:
        return None
    latency = _num(doc.get("latency_seconds"))
    return written - latency if latency is not None else written


@dataclass
class _Series:
    pid: Any
    comm: str
    role: Any
    rank: Any
    victim: bool
    anon: list[tuple[float, float | None]] = field(default_factory=list)
    uss: list[tuple[float, float | None]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return role_key(self.role)

    def describe(self) -> str:
        return f"pid {self.pid} {self.comm} ({_role_label(self.role, self.rank)})"


@dataclass
class _Cgroup:
    path: str
    usage: list[tuple[float, float | None]]
    limit: float | None


def _process_series(rows: list[dict[str, Any]], origin: float, victim_pid: Any) -> list[_Series]:
    by_pid: dict[Any, list[tuple[float, dict[str, Any]]]] = {}
    for r in rows:
        t = _time(r.get("time"))
        pid = r.get("pid")
        if t is None or isinstance(pid, (dict, list)):
            continue
        by_pid.setdefault(pid, []).append((t - origin, r))
    out = []
    for pid, timed in by_pid.items():
        timed.sort(key=lambda x: x[0])
        last = timed[-1][1]  # the latest row names the process (a worker may show as manager for one tick)
        s = _Series(pid, str(last.get("comm") or ""), last.get("role"), last.get("rank"), pid == victim_pid)
        for t, r in timed:
            anon = _num(r.get("anon"))
            s.anon.append((t, anon if anon is not None else _num(r.get("rss"))))
            s.uss.append((t, _num(r.get("uss"))))
        out.append(s)
    # the victim last, so that its line is drawn over the others
    out.sort(key=lambda s: (s.victim, str(s.key), str(s.pid)))
    return out


def _related(path: str, wanted: Iterable[str]) -> bool:
    """A cgroup the victim was in, or one above or below it."""
    p = path.rstrip("/")
    for w in wanted:
        w = w.rstrip("/")
        if p == w or w.startswith(p + "/") or p.startswith(w + "/"):
            return True
    return False


def _cgroups(doc: dict[str, Any], origin: float, kill: float) -> tuple[list[_Cgroup], str]:
    """The cgroups to draw, and a note on what was left out. An incident with no job has every
    cgroup of the node in its history: only the victim's (or those above or below it) are drawn."""
    rows = _rows(_dict(doc.get("history")).get("cgroups"))
    note = ""
    if _dict(doc.get("victim")).get("job") is None and rows:
        wanted = {str(v.get("cgroup")) for v in _rows(_dict(doc.get("diagnosis")).get("victims")) if v.get("cgroup")}
        if wanted:
            kept = [r for r in rows if _related(str(r.get("path") or ""), wanted)]
            if len(kept) < len(rows):
                left = sorted({str(r.get("path") or "") for r in rows} - {str(r.get("path") or "") for r in kept})
                note = f"cgroups in the history that are not the victim's, not drawn: {', '.join(left)}"
            rows = kept
    by_path: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for r in rows:
        t = _time(r.get("time"))
        if t is not None:
            by_path.setdefault(str(r.get("path") or ""), []).append((t, r))
    out = []
    for path, timed in sorted(by_path.items()):
        timed.sort(key=lambda x: x[0])
        limit = None
        for t, r in timed:  # the limit at the kill: the last one known before it, else the first after
            value = _num(r.get("effective_limit"))
            value = value if value is not None else _num(r.get("limit"))
            if value is not None and (limit is None or t <= kill):
                limit = value
            if t > kill and limit is not None:
                break
        out.append(_Cgroup(path, [(t - origin, _num(r.get("usage"))) for t, r in timed], limit))
    return out, note


def _nice_step(raw: float) -> float:
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    exp = math.floor(math.log10(raw))
    base = 10.0**exp
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * base * (1 + 1e-9):
            return m * base
    return 10 * base  # pragma: no cover


def _fmt(v: float, step: float) -> str:
    """``v`` with as many decimals as ``step`` needs; a minus sign for negatives."""
    decimals = 0
    while decimals < 6 and abs(step * 10**decimals - round(step * 10**decimals)) > 1e-6:
        decimals += 1
    text = f"{v:.{decimals}f}"
    return "0" if float(text) == 0 else text.replace("-", "\u2212")


def _x_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    span = hi - lo
    minutes = span >= 600
    unit = 60.0 if minutes else 1.0
    step = _nice_step(span / unit / 7) * unit
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    i = 0
    while first + i * step <= hi + step * 1e-9 and i < 50:
        v = first + i * step
        ticks.append((v, _fmt(v / unit, step / unit) + (" min" if minutes else " s")))
        i += 1
    return ticks


def _y_ticks(top: float) -> list[tuple[float, str]]:
    unit_i = 0
    while unit_i < len(_UNITS) - 1 and top / 1024 ** (unit_i + 1) >= 1:
        unit_i += 1
    unit = 1024.0**unit_i
    step = _nice_step(top / unit / 5)
    ticks = []
    i = 0
    while i * step * unit <= top * (1 + 1e-9) and i < 50:
        ticks.append((i * step * unit, f"{_fmt(i * step, step)} {_UNITS[unit_i]}"))
        i += 1
    return ticks


class _Scale:
    def __init__(self, x0: float, x1: float, ytop: float) -> None:
        self.x0, self.x1, self.ytop = x0, x1, ytop

    def x(self, t: float) -> float:
        return _LEFT + (t - self.x0) / (self.x1 - self.x0) * (_W - _LEFT - _RIGHT)

    def y(self, v: float) -> float:
        return _H - _BOTTOM - min(v, self.ytop) / self.ytop * (_H - _TOP - _BOTTOM)


def _path_d(points: Sequence[tuple[float, float | None]], sc: _Scale) -> tuple[str, list[tuple[float, float]]]:
    """The path's d (a None breaks the line) and the points that stand alone (drawn as dots)."""
    parts: list[str] = []
    run: list[tuple[float, float]] = []
    alone: list[tuple[float, float]] = []

    def flush() -> None:
        if run:
            parts.append("M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in run))
            if len(run) == 1:
                alone.append(run[0])
            run.clear()

    for t, v in points:
        if v is None:
            flush()
        else:
            run.append((sc.x(t), sc.y(v)))
    flush()
    return " ".join(parts), alone


def _chart(
    chart_id: str,
    title: str,
    series: list[tuple[_Series, list[tuple[float, float | None]]]],
    cgroups: list[_Cgroup],
    sc: _Scale,
    far_limits: list[_Cgroup],
    victim_label: str,
) -> str:
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM
    o = [
        f'<figure class="chart-figure"><figcaption>{_text(title)}</figcaption>',
        f'<svg id="{chart_id}" class="chart" viewBox="0 0 {_W} {_H}" role="img" aria-label="{_text(title)}" '
        f'preserveAspectRatio="xMidYMid meet" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">',
        f"<title>{_text(title)}</title>",
        f'<rect class="plot-area" x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" fill="#fcfcfd" '
        'stroke="#d0d4da"/>',
        '<g class="grid y-ticks">',
    ]
    for v, label in _y_ticks(sc.ytop):
        y = sc.y(v)
        o.append(f'<line x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e6e8ec"/>')
        o.append(f'<text x="{_LEFT - 8}" y="{y + 4:.1f}" text-anchor="end" fill="#555">{_text(label)}</text>')
    o.append('</g><g class="grid x-ticks">')
    for t, label in _x_ticks(sc.x0, sc.x1):
        x = sc.x(t)
        o.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP}" y2="{_H - _BOTTOM}" stroke="#eef0f3"/>')
        o.append(f'<text x="{x:.1f}" y="{_H - _BOTTOM + 16}" text-anchor="middle" fill="#555">{_text(label)}</text>')
    o.append("</g>")
    o.append(
        f'<text class="axis-title" x="{_LEFT + plot_w / 2:.1f}" y="{_H - 6}" text-anchor="middle" fill="#333">'
        "time relative to the kill</text>"
    )
    # the cgroups' usage under the processes, their limits over them
    for cg in cgroups:
        d, alone = _path_d(cg.usage, sc)
        if d:
            o.append(
                f'<path class="usage" data-cgroup="{_text(cg.path)}" d="{d}" fill="none" stroke="{USAGE_COLOUR}" '
                f'stroke-width="2.5" stroke-linejoin="round" stroke-opacity="0.55"><title>cgroup usage: '
                f"{_text(cg.path)}</title></path>"
            )
            o += [f'<circle class="usage" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{USAGE_COLOUR}"/>' for x, y in alone]
    o.append('<g class="processes">')
    for s, points in series:
        d, alone = _path_d(points, sc)
        colour = ROLE_STYLES[s.key][0]
        width = "3" if s.victim else "1.6"
        cls = f"series role-{s.key}" + (" victim" if s.victim else "")
        o.append(
            f'<path class="{cls}" data-pid="{_text(s.pid)}" data-role="{_text(s.role)}" d="{d}" fill="none" '
            f'stroke="{colour}" stroke-width="{width}" stroke-linejoin="round" stroke-linecap="round">'
            f"<title>{_text(s.describe())}</title></path>"
        )
        o += [
            f'<circle class="point role-{s.key}" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"/>' for x, y in alone
        ]
    o.append("</g>")
    label_ys: list[float] = []
    for cg in cgroups:
        if cg.limit is None or cg in far_limits:
            continue
        y = sc.y(cg.limit)
        which = f" ({_tail(cg.path)})" if len(cgroups) > 1 else ""
        ly = y - 6
        while any(abs(ly - u) < 14 for u in label_ys):
            ly -= 14
        label_ys.append(ly)
        o.append(
            f'<line class="limit" data-bytes="{int(cg.limit)}" data-cgroup="{_text(cg.path)}" x1="{_LEFT}" '
            f'x2="{_W - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="{LIMIT_COLOUR}" stroke-width="2" '
            f'stroke-dasharray="8 5"><title>limit of {_text(cg.path)}</title></line>'
            f'<text class="limit-label" x="{_LEFT + 8}" y="{ly:.1f}" fill="{LIMIT_COLOUR}" font-weight="bold">'
            f"limit {_text(_size(cg.limit))}{_text(which)}</text>"
        )
    for j, cg in enumerate(far_limits):
        which = f" ({_tail(cg.path)})" if len(cgroups) > 1 else ""
        o.append(
            f'<text class="limit-label far" x="{_LEFT + 8}" y="{_TOP + 16 + 14 * j}" fill="{LIMIT_COLOUR}" '
            f'font-weight="bold">limit {_text(_size(cg.limit))}{_text(which)}: '
            "far above the chart, not to scale</text>"
        )
    # the kill: a line across the plot, the label in the margin above it
    x = sc.x(0.0)
    right_half = x > _LEFT + plot_w / 2
    anchor, dx = ("end", 4) if right_half else ("start", -4)
    o.append(
        f'<g class="kill"><line class="kill-line" x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP - 8}" y2="{_H - _BOTTOM}" '
        f'stroke="{KILL_COLOUR}" stroke-width="2"/>'
        f'<text class="kill-label" x="{x + dx:.1f}" y="{_TOP - 13}" text-anchor="{anchor}" fill="{KILL_COLOUR}" '
        f'font-weight="bold">\u2715 killed {_text(victim_label)}</text></g>'
    )
    o.append("</svg></figure>")
    return "\n".join(o)


def _tail(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] or path


def _charts(doc: dict[str, Any]) -> str:
    history = _dict(doc.get("history"))
    kill = kill_time(doc)
    victim = _dict(doc.get("victim"))
    procs_rows = _rows(history.get("processes"))
    origin = kill if kill is not None else max((_time(r.get("time")) or 0.0 for r in procs_rows), default=0.0)
    series = _process_series(procs_rows, origin, victim.get("pid"))
    cgroups, cg_note = _cgroups(doc, origin, origin)
    drawn = [cg for cg in cgroups if any(v is not None for _, v in cg.usage) or cg.limit is not None]
    has_anon = any(v is not None for s in series for _, v in s.anon)
    notes = [f'<p class="note">{_text(cg_note)}</p>'] if cg_note else []
    if not has_anon and not drawn:
        return (
            '<p class="no-history">No history recorded: the agent had no samples of the victim\'s job or cgroup '
            f"before the kill ({_text(history.get('source') or 'no history')}).</p>" + "".join(notes)
        )
    times = [t for s in series for t, _ in s.anon] + [t for cg in drawn for t, _ in cg.usage] + [0.0]
    x0, x1 = min(times), max(times)
    pad = max((x1 - x0) * 0.02, 0.05)
    x0, x1 = x0 - pad, x1 + pad
    data = [v for s in series for _, v in s.anon + s.uss if v is not None]
    data += [v for cg in drawn for _, v in cg.usage if v is not None]
    peak = max(data, default=0.0)
    far = [cg for cg in drawn if cg.limit is not None and peak > 0 and cg.limit > peak * _FAR_LIMIT]
    top = max([peak] + [cg.limit for cg in drawn if cg.limit is not None and cg not in far])
    top = top * 1.08 if top > 0 else 1024.0**2
    sc = _Scale(x0, x1, top)
    vcomm = str(victim.get("comm") or "")
    vcomm = vcomm if len(vcomm) <= 40 else vcomm[:39] + "\u2026"  # a kernel comm is 15 characters at most
    vlabel = f"pid {victim.get('pid')} {vcomm} ({_role_label(*_victim_role(doc))})"
    parts = [_legend(series, drawn)]
    if not series:
        parts.append('<p class="note">No per-process history recorded: only the cgroup is drawn.</p>')
    parts.append(
        _chart("chart-anon", "Anonymous RSS per process (RSS where anon is unknown)",
               [(s, s.anon) for s in series], drawn, sc, far, vlabel)
    )  # fmt: skip
    with_uss = [(s, s.uss) for s in series if any(v is not None for _, v in s.uss)]
    if with_uss:
        # its own scale: private sets are often a small part of the limit (a worker's USS climbing from
        # 30 to 100 MiB under a 1.5 GiB limit would be a flat line); the cgroup is in the chart above
        uss_peak = max((v for _, points in with_uss for _, v in points if v is not None), default=0.0)
        uss_sc = _Scale(x0, x1, uss_peak * 1.08 if uss_peak > 0 else 1024.0**2)
        parts.append(
            _chart("chart-uss", "USS per process, on its own scale (memory it shares with no other process: "
                   "copy-on-write defeat shows here)", with_uss, [], uss_sc, [], vlabel)
        )  # fmt: skip
    elif series:
        parts.append('<p class="note">No USS in the history (the agent measures it within its PSS budget).</p>')
    return "\n".join(parts + notes)


def _legend(series: list[_Series], cgroups: list[_Cgroup]) -> str:
    counts: dict[str, int] = {}
    for s in series:
        counts[s.key] = counts.get(s.key, 0) + 1
    items = []
    for key in ROLE_STYLES:
        if key in counts:
            colour, label = ROLE_STYLES[key]
            items.append(
                f'<li class="legend-role role-{key}"><span class="swatch" style="background:{colour}"></span>'
                f"{_text(label)} ({counts[key]})</li>"
            )
    if any(s.victim for s in series):
        items.append('<li><span class="swatch thick" style="background:#777"></span>the victim (thick)</li>')
    if cgroups:
        items.append(f'<li><span class="swatch" style="background:{USAGE_COLOUR};opacity:.55"></span>cgroup usage</li>')
    if any(cg.limit is not None for cg in cgroups):
        items.append(f'<li><span class="swatch dashed" style="border-color:{LIMIT_COLOUR}"></span>cgroup limit</li>')
    items.append(f'<li><span class="swatch vertical" style="background:{KILL_COLOUR}"></span>the kill</li>')
    return '<ul class="legend">' + "".join(items) + "</ul>"


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
        f'<section class="charts"><h2>Memory before the kill</h2>{_charts(doc)}</section>',
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


def write_incident_html(doc: dict[str, Any], path: Path) -> None:
    """Render ``doc`` and write it to ``path`` atomically (a temporary file beside it, then a rename):
    a new file readable by its owner only, an existing one with its mode kept (see oomwatch.sharedfile)."""
    write_for_people(path, render_incident_html(doc))


def _named(cause: dict[str, Any]) -> str:
    """A candidate cause with its confidence: "Every rank loads the checkpoint (35%)"."""
    return f"{cause.get('title') or cause.get('id')} ({_num(cause.get('confidence')) or 0:.0%})"
