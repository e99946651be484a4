"""The values an incident's HTML page is drawn from, read defensively from its document (any field may be
missing or of another shape): escaped text, sizes, roles and their colours, the kill's time, each process's
series and the victim's cgroups. Pure: imports the engine's sizes only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from typing import Any

from oomwatch.engine.sizes import human

# role -> (colour, legend label); unknown and other share a colour (a process the rules could not place)
ROLE_STYLES: dict[str, tuple[str, str]] = {
    "launcher": ("#7b3fbf", "launcher"),
    "rank": ("#1f6fd1", "rank"),
    "dataloader_worker": ("#e8710a", "DataLoader worker"),
    "manager": ("#1e9e4a", "manager"),
    "unknown": ("#0e9aa7", "unknown"),
    "other": ("#0e9aa7", "other"),
}


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
