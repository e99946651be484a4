"""The SVG charts of an incident's HTML page: per-process anonymous RSS with the cgroup's usage and limit,
then per-process USS on its own scale; each line coloured by role, the kill a vertical line (see
:mod:`oomwatch.render.incident_html`). Pure: returns markup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from oomwatch.render.incident_values import (
    ROLE_STYLES,
    _Cgroup,
    _cgroups,
    _dict,
    _process_series,
    _role_label,
    _rows,
    _Series,
    _size,
    _text,
    _time,
    _victim_role,
    kill_time,
)

USAGE_COLOUR = "#3b4252"
LIMIT_COLOUR = "#d62728"
KILL_COLOUR = "#111111"

# the chart's geometry, in SVG user units (the SVG scales to the page's width)
_W, _H = 1000, 270
_LEFT, _RIGHT, _TOP, _BOTTOM = 78, 24, 26, 42
_FAR_LIMIT = 4.0  # a limit more than this many times the largest sample is noted, not drawn to scale

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


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
    o = _axes(chart_id, title, sc)
    o += _lines(series, cgroups, sc)
    o += _limits(cgroups, far_limits, sc)
    o += _kill(sc, victim_label)
    o.append("</svg></figure>")
    return "\n".join(o)


def _axes(chart_id: str, title: str, sc: _Scale) -> list[str]:
    """The figure's opening, the plot's frame, its grid and tick labels, the time axis's title."""
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
    return o


def _lines(
    series: list[tuple[_Series, list[tuple[float, float | None]]]], cgroups: list[_Cgroup], sc: _Scale
) -> list[str]:
    """The cgroups' usage, then each process's line over it."""
    o: list[str] = []
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
    return o


def _limits(cgroups: list[_Cgroup], far_limits: list[_Cgroup], sc: _Scale) -> list[str]:
    """Each cgroup's limit as a dashed line labelled with its value; a limit far above the chart as a note."""
    o: list[str] = []
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
    return o


def _kill(sc: _Scale, victim_label: str) -> list[str]:
    """The kill: a line across the plot at 0, labelled with the victim."""
    plot_w = _W - _LEFT - _RIGHT
    o: list[str] = []
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
    return o


def _tail(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] or path


def charts_html(doc: dict[str, Any]) -> str:
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
